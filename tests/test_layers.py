"""The import contract (`.importlinter`, issue 49 item 3): cuda_agent's layers import only
downward, function-level imports included, checked by import-linter's `lint-imports`."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    """`lint-imports` on the package found first from `cwd` (the checkout's own, or a copy)."""
    exe = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(exe), "--no-cache"], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_the_layers_import_only_downward():
    r = lint_imports(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 kept, 0 broken" in r.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    """The check can fail: in a copy of the package, the IR imports the tuner (inside a
    function, where a cycle is easiest to hide)."""
    shutil.copytree(ROOT / "cuda_agent", tmp_path / "cuda_agent",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pt"))
    shutil.copy(ROOT / ".importlinter", tmp_path)
    with open(tmp_path / "cuda_agent" / "ir" / "graph.py", "a") as f:
        f.write("\n\ndef _upward():\n    from ..tuner import Tuner\n    return Tuner\n")
    r = lint_imports(tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "cuda_agent.ir.graph -> cuda_agent.tuner" in r.stdout
