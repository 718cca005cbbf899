"""Problem files generated from parametrised definitions (benchmarks/families/,
cuda_agent/experiments/problem_files.py): each generated file is what its family renders, byte
for byte, so it keeps its identity (the source hash the recorded sweeps and the store key it
by); no two suite files differ only in sizes unless a family generates them; every suite
problem loads."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from cuda_agent.errors import SettingsError
from cuda_agent.experiments import problem_files as pf
from cuda_agent.problem import load_problem

ROOT = Path(__file__).resolve().parents[1]

TEMPLATE = '''"""$doc"""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.$fn(x)


def get_inputs():
    return [torch.randn($x)]
'''


def _family(root: Path, name: str, problems: dict[str, dict], template: str = TEMPLATE,
            defaults: dict | None = None) -> None:
    """A family module under root/benchmarks/families, written as a user would."""
    where = root / pf.FAMILIES_DIR
    where.mkdir(parents=True, exist_ok=True)
    (where / f"{name}.py").write_text(
        f"TEMPLATE = {template!r}\nDEFAULTS = {defaults or {}!r}\nPROBLEMS = {problems!r}\n")


# -- the checkout -----------------------------------------------------------------------------

def test_generated_files_equal_their_definitions():
    assert pf.stale(ROOT) == []


def test_files_that_differ_only_in_sizes_come_from_a_family():
    made = pf.rendered(ROOT)
    assert len(made) >= 60 and pf.size_groups(ROOT)
    assert [p for g in pf.size_groups(ROOT) for p in g if p not in made] == []


def test_every_suite_problem_loads():
    """Checked on meta tensors: the generated files (and the others) in the common format."""
    paths = [p for s in pf.SUITES for p in sorted((ROOT / s).glob("*.py"))]
    assert len(paths) > 200
    for path in paths:
        load_problem(path)


def test_generated_files_keep_the_identity_their_sweeps_recorded():
    """The source hash a recorded sweep names is the generated file's: a problem's store
    entries, caches and sweeps still find it."""
    checked = 0
    for rel in pf.rendered(ROOT):
        path = ROOT / rel
        data_dir = path.parent.parent / "data" if "validation" in rel else ROOT / "benchmarks/data"
        for sweep in sorted(data_dir.glob(f"*/{path.stem}.json.gz")):
            recorded = json.loads(gzip.decompress(sweep.read_bytes()))["source_hash"]
            assert load_problem(path, check=False).source_hash == recorded, sweep
            checked += 1
    assert checked >= 20


def test_the_command_checks_the_checkout(capsys):
    assert pf.main(["--check"]) == 0
    assert "0 generated problem files differ" in capsys.readouterr().out


# -- the mechanism, on a made-up checkout ------------------------------------------------------

def test_check_names_a_differing_or_missing_file_and_write_renders_them(tmp_path, capsys):
    _family(tmp_path, "unary", {"p/a.py": {"doc": "A.", "fn": "relu", "x": "4, 8"},
                                "p/b.py": {"doc": "B.", "fn": "tanh", "x": 16}})
    (tmp_path / "p").mkdir()
    (tmp_path / "p/a.py").write_text("edited by hand\n")
    found = pf.stale(tmp_path)
    assert [line.split(":")[0] for line in found] == ["p/a.py", "p/b.py"]
    assert "differs from its definition in benchmarks/families/unary.py" in found[0]
    assert "missing" in found[1]
    assert pf.main(["--root", str(tmp_path)]) == 1
    assert pf.write(tmp_path) == ["p/a.py", "p/b.py"]
    assert pf.stale(tmp_path) == [] and pf.write(tmp_path) == []
    text = (tmp_path / "p/b.py").read_text()
    assert text.startswith('"""B."""') and "torch.tanh(x)" in text and "randn(16)" in text
    load_problem(tmp_path / "p/b.py")  # a problem file like any other


def test_defaults_fill_what_a_problem_does_not_give(tmp_path):
    _family(tmp_path, "unary", {"a.py": {"doc": "A.", "x": 4}, "b.py": {"doc": "B.", "x": 4,
                                                                        "fn": "tanh"}},
            defaults={"fn": "relu"})
    made = pf.rendered(tmp_path)
    assert "torch.relu(x)" in made["a.py"][1] and "torch.tanh(x)" in made["b.py"][1]


@pytest.mark.parametrize("values, message", [
    ({"doc": "A.", "fn": "relu"}, "no value for slot 'x'"),
    ({"doc": "A.", "fn": "relu", "x": 4, "shape": 4}, "no slot shape"),
    ({"doc": "A.", "fn": "relu", "x": 4.0}, "str or int, not float"),
])
def test_a_slot_missing_misspelt_or_of_another_type_is_an_error(tmp_path, values, message):
    _family(tmp_path, "unary", {"a.py": values})
    with pytest.raises(SettingsError, match=message):
        pf.rendered(tmp_path)


@pytest.mark.parametrize("path", ["../a.py", "/tmp/a.py", "a.txt"])
def test_a_problem_outside_the_checkout_or_not_python_is_an_error(tmp_path, path):
    _family(tmp_path, "unary", {path: {"doc": "A.", "fn": "relu", "x": 4}})
    with pytest.raises(SettingsError, match="a .py file's path inside the checkout"):
        pf.rendered(tmp_path)


def test_a_file_generated_by_two_families_is_an_error(tmp_path):
    for name in ("one", "two"):
        _family(tmp_path, name, {"a.py": {"doc": "A.", "fn": "relu", "x": 4}})
    with pytest.raises(SettingsError, match="a.py: generated by both one and two"):
        pf.rendered(tmp_path)


def test_size_groups_are_files_that_differ_only_in_numbers(tmp_path):
    src = TEMPLATE.replace("$fn", "relu")
    suite = tmp_path / "s"
    suite.mkdir()
    (suite / "a.py").write_text(src.replace("$doc", "A.").replace("$x", "4, 8"))
    # another docstring, a comment, an extra import and other sizes: the same problem
    (suite / "b.py").write_text(src.replace("$doc", "B.").replace("$x", "16, -1").replace("(x)\n", "(x)  # rows\n")
                                .replace("import torch\n", "import torch\nimport math\n"))
    (suite / "c.py").write_text(src.replace("$doc", "C.").replace("relu", "tanh")
                                .replace("$x", "4, 8"))  # another operator
    assert pf.size_groups(tmp_path, ("s",)) == [["s/a.py", "s/b.py"]]
