"""Problem files generated from parametrised definitions: one module per operator family holds
the file's text once, each problem only its sizes.

A family is a module under benchmarks/families/ with

* ``TEMPLATE``: a problem file's text in the field's common format, with ``$slot`` fields
  (`string.Template`: ``$`` appears in no Python problem file, unlike braces);
* ``DEFAULTS`` (optional): slot values shared by most of its problems;
* ``PROBLEMS``: the path of each generated file (relative to the checkout) -> its slot values,
  each the exact text it stands for (an int is written as `str` writes it).

The generated files stay real, standalone problem files, committed beside the others, so that
`cuda-agent tune FILE`, the independent harnesses and the field's tools read them as before.
They are rendered byte for byte as they were written by hand, so every problem keeps its
identity: the source hash (`Problem.source_hash`) that keys the store and the recorded sweeps,
the capture cache's key and the goldens. Editing a family changes its files' text, and so
their source hashes, as editing each file would.

    python -m cuda_agent.experiments.problem_files            # --check: files that differ
    python -m cuda_agent.experiments.problem_files --write    # render every family's files
    python -m cuda_agent.experiments.problem_files --groups   # files differing only in sizes
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import string
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from ..errors import SettingsError
from ..tempfiles import write_atomic

FAMILIES_DIR = "benchmarks/families"
SUITES = ("benchmarks/problems", "benchmarks/realistic", "benchmarks/conv_chains",
          "benchmarks/models", "benchmarks/validation/problems", "tests/data/good")
"""the folders of problem files in the common format (benchmarks/unseen_ops.py defines its
operators in code, tests/data/bad its files malformed on purpose)"""
WRITE = "python -m cuda_agent.experiments.problem_files --write"


def repo_root() -> Path:
    """The checkout this package sits in (the families and suites are read from it)."""
    return Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Family:
    """One operator family: its template and the slot values of each of its problems."""

    name: str
    template: str
    problems: dict[str, dict[str, str]]
    defaults: dict[str, str] = field(default_factory=dict)

    def slots(self) -> set[str]:
        """The template's slot names."""
        return {m.group("named") or m.group("braced")
                for m in string.Template.pattern.finditer(self.template)
                if m.group("named") or m.group("braced")}

    def render(self, path: str) -> str:
        """The text of the problem file at `path` (one of `problems`)."""
        values = {**self.defaults, **self.problems[path]}
        unknown = sorted(set(values) - self.slots())
        if unknown:  # a misspelt slot would otherwise be dropped without a word
            raise SettingsError(f"{self.name}: {path}: no slot {', '.join(unknown)} in its "
                                "template")
        try:
            return string.Template(self.template).substitute(values)
        except KeyError as exc:
            raise SettingsError(f"{self.name}: {path}: no value for slot {exc}") from None
        except ValueError as exc:  # a stray "$" in the template
            raise SettingsError(f"{self.name}: TEMPLATE: {exc}") from None


def _text(name: str, value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise SettingsError(f"{name}: slot values are str or int, not {type(value).__name__}")
    return str(value)


def _import(path: Path) -> ModuleType:
    """A family module, imported by path (benchmarks/ is the checkout's, not the package's)."""
    spec = importlib.util.spec_from_file_location(f"cuda_agent_family_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise SettingsError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_family(path: Path) -> Family:
    """The family defined by the module at `path`."""
    module = _import(path)
    template = getattr(module, "TEMPLATE", None)
    problems = getattr(module, "PROBLEMS", None)
    defaults = getattr(module, "DEFAULTS", {})
    if not isinstance(template, str) or not isinstance(problems, dict) or not problems:
        raise SettingsError(f"{path}: a family defines TEMPLATE (str) and PROBLEMS (a dict of "
                            "file paths to slot values)")
    name = path.stem
    for rel in problems:
        where = Path(str(rel))
        if where.is_absolute() or ".." in where.parts or where.suffix != ".py":
            # --write writes there: only .py files inside the checkout
            raise SettingsError(f"{path}: {rel}: a problem is a .py file's path inside the "
                                "checkout, relative to it")
    return Family(
        name, template,
        {p: {k: _text(f"{name}: {p}: {k}", v) for k, v in values.items()}
         for p, values in problems.items()},
        {k: _text(f"{name}: DEFAULTS: {k}", v) for k, v in defaults.items()})


def families(root: Path) -> list[Family]:
    """Every family of the checkout at `root`, by name."""
    return [load_family(p) for p in sorted((root / FAMILIES_DIR).glob("*.py"))]


def rendered(root: Path) -> dict[str, tuple[str, str]]:
    """Every generated file (relative path) -> (its family's name, its text)."""
    out: dict[str, tuple[str, str]] = {}
    for fam in families(root):
        for path in fam.problems:
            if path in out:
                raise SettingsError(f"{path}: generated by both {out[path][0]} and {fam.name}")
            out[path] = (fam.name, fam.render(path))
    return out


def stale(root: Path) -> list[str]:
    """A line per generated file that is missing or differs from what its family renders."""
    out = []
    for path, (fam, text) in sorted(rendered(root).items()):
        where = root / path
        if not where.is_file():
            out.append(f"{path}: missing (family {FAMILIES_DIR}/{fam}.py)")
        elif where.read_text() != text:
            out.append(f"{path}: differs from its definition in {FAMILIES_DIR}/{fam}.py "
                       f"(edit the family, then `{WRITE}`)")
    return out


def write(root: Path) -> list[str]:
    """Write the generated files that are missing or differ; their paths."""
    written = []
    for path, (_, text) in sorted(rendered(root).items()):
        where = root / path
        if not where.is_file() or where.read_text() != text:
            write_atomic(where, text.encode())
            written.append(path)
    return written


# -- finding files that differ only in sizes --------------------------------------------------

def _docstring_free(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        return body[1:]
    return body


class _Sizes(ast.NodeTransformer):
    """Numbers (negated ones too) replaced by one placeholder."""

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            return ast.Constant("<size>")
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            return node.operand
        return node


def shape_of(source: str) -> str:
    """A problem file's code with its sizes blanked: the same for two files that differ only
    in number literals, docstrings, comments, layout and imports (an unused import changes
    nothing a problem computes)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and len(node.body) > 1:
            node.body = _docstring_free(node.body)
    body = [s for s in _docstring_free(tree.body)
            if not isinstance(s, (ast.Import, ast.ImportFrom))]
    return ast.dump(_Sizes().visit(ast.Module(body=body, type_ignores=[])))


def size_groups(root: Path, suites: tuple[str, ...] = SUITES) -> list[list[str]]:
    """Groups (two or more files, relative paths) of the suites' problem files that differ
    only in sizes, each sorted, in order of their first file."""
    by_shape: dict[str, list[str]] = defaultdict(list)
    for suite in suites:
        for path in sorted((root / suite).glob("*.py")):
            by_shape[shape_of(path.read_text())].append(path.relative_to(root).as_posix())
    return sorted((sorted(g) for g in by_shape.values() if len(g) > 1), key=lambda g: g[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cuda_agent.experiments.problem_files",
                                 description=__doc__.splitlines()[0])
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--check", action="store_true",
                      help="list the generated files that differ from their family (default)")
    what.add_argument("--write", action="store_true", help="render every family's files")
    what.add_argument("--groups", action="store_true",
                      help="list the suites' files that differ only in sizes, and which of "
                      "them a family generates")
    ap.add_argument("--root", type=Path, default=None,
                    help="the checkout (default: this package's)")
    args = ap.parse_args(argv)
    root = (args.root or repo_root()).resolve()
    try:
        if args.write:
            written = write(root)
            print(f"wrote {len(written)} files" + "".join(f"\n  {p}" for p in written))
            return 0
        if args.groups:
            made = rendered(root)
            groups = size_groups(root)
            for group in groups:
                print(f"{len(group)}: " + ", ".join(
                    p + ("" if p in made else " (not generated)") for p in group))
            print(f"{len(groups)} groups, {sum(map(len, groups))} files; "
                  f"{len(made)} files generated by {len(families(root))} families")
            return 0
        found = stale(root)
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    for line in found:
        print(line)
    print(f"{len(found)} generated problem files differ from their families"
          + (f"; to render them: {WRITE}" if found else ""))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
