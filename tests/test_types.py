"""mypy is clean on the package (issue 49 item 5), with the configuration in pyproject.toml:
no error in cuda_agent, missing imports ignored only for named third-party modules that ship
no types, no module of ours exempted, and every `# type: ignore` naming its error code."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ERROR = re.compile(r"^(?P<file>[^:\s]+\.py):\d+: error: ", re.M)


def mypy_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]


def test_mypy_is_clean_on_the_package() -> None:
    # the cache lives in the checkout (.mypy_cache, git-ignored): a cold run takes about a
    # minute, a warm one seconds
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(ROOT / ".mypy_cache")],
        cwd=ROOT, capture_output=True, text=True, timeout=900)
    report = done.stdout + done.stderr
    files = {m["file"] for m in ERROR.finditer(report)}
    assert done.returncode in (0, 1) and (done.returncode == 0) == (not files), report
    assert not files, f"mypy found errors in {sorted(files)}:\n{report}"


def test_no_module_of_ours_is_exempted() -> None:
    config = mypy_config()
    assert config["packages"] == ["cuda_agent"]
    assert not config.get("ignore_missing_imports"), "per third-party module only"
    assert not config.get("ignore_errors")
    for override in config.get("overrides", []):
        modules = override["module"]
        modules = [modules] if isinstance(modules, str) else modules
        assert not override.get("ignore_errors"), override
        assert not [m for m in modules if m.split(".")[0] == "cuda_agent"], override
    assert "ignore-without-code" in config.get("enable_error_code", [])
