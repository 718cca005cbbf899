"""The golden outputs (`cuda_agent/experiments/goldens.py`, files in tests/goldens/): captured
graphs, plans, cut sets, spaces, rendered kernels and replay bench orders as they were when the
goldens were written. A redesign that changes no result keeps every one of them; a mismatch
names the problem, the space, the template and configuration, and the command that rewrites
them (for a change meant to change them).

The default tier checks `goldens.SUBSET` (a problem or two of each template family, a program,
refusals) and a short replay; `-m slow` checks every problem and every replay run."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from cuda_agent.experiments import goldens

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / goldens.GOLDENS_DIR


def _report(found: list[str]) -> str:
    shown = found[:30] + ([f"... and {len(found) - 30} more"] if len(found) > 30 else [])
    return ("\n".join(shown) + f"\n{len(found)} differences from the goldens; if the change "
            f"is intended, regenerate them: {goldens.REGENERATE}")


def test_goldens_subset() -> None:
    found = goldens.check(ROOT, FOLDER, goldens.SUBSET, goldens.SUBSET_REPLAY)
    assert not found, _report(found)


SLOW_PARTS = 8
"""the slow check split in parts (every 8th problem), so that pytest-xdist spreads it over
cores: about 25 minutes on one loaded core in all"""


@pytest.mark.slow
@pytest.mark.parametrize("part", range(SLOW_PARTS))
def test_goldens_everything(part: int) -> None:
    keys = [c.key for c in goldens.cases(ROOT)][part::SLOW_PARTS]
    found = goldens.check(ROOT, FOLDER, keys, None)
    assert not found, _report(found)


@pytest.mark.slow
def test_goldens_replay_everything() -> None:
    found = goldens.check(ROOT, FOLDER, [], goldens.ReplayRuns())
    assert not found, _report(found)


def test_goldens_cover_every_problem() -> None:
    """Every problem file and unseen operator has a golden (a new one needs `--update`)."""
    keys = {c.key for c in goldens.cases(ROOT)}
    stored = set()
    for group in [*goldens.FILE_SUITES, "unseen_ops"]:
        stored |= set(goldens.read(FOLDER, group)["entries"])
    assert keys == stored, (f"without a golden: {sorted(keys - stored)}; golden of no problem: "
                            f"{sorted(stored - keys)}; regenerate: {goldens.REGENERATE}")


def test_a_change_is_named() -> None:
    """A changed rendering is reported with its problem, space, template and configuration."""
    key = "good/relu_small"
    labels = goldens.Labels()
    now = {key: goldens.problem_entry(next(c for c in goldens.cases(ROOT) if c.key == key),
                                      ROOT, labels)}
    golden = copy.deepcopy(now)
    render = golden[key]["precisions"]["fp32"]["spaces"][0]["templates"][0]["renders"][2]
    render[1] = "0" * goldens.HASH_CHARS
    found = goldens.differences(golden, now, labels)
    # the golden said the tf32:conv space is the fp32 one: both differ now
    assert len(found) == 2, found
    for line, precision in zip(found, goldens.PRECISIONS):
        assert line.startswith(f"{key}: {precision} space 0 template map render #2, "), line
        assert labels[render[0]] in line and "rendered source changed" in line


def test_update_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    kept = tmp_path / goldens.file_name("problems")
    kept.write_text("{}")
    assert goldens.main(["--out", str(tmp_path), "--quiet"]) == 2
    assert "pass --update" in capsys.readouterr().err
    assert kept.read_text() == "{}"


def test_update_of_a_few_problems_keeps_the_rest(tmp_path: Path) -> None:
    """`--update --only KEYS` recomputes those problems' entries and keeps every other entry
    and the replay runs byte for byte."""
    import shutil

    key = "good/relu_small"
    for p in FOLDER.glob("*.json"):
        shutil.copy(p, tmp_path / p.name)
    good = tmp_path / goldens.file_name("good")
    data = json.loads(good.read_text())
    right = copy.deepcopy(data["entries"][key])
    data["entries"][key] = {"stale": True}
    other = next(k for k in data["entries"] if k != key)
    good.write_text(goldens.dumps(data["header"], data["entries"]))
    before = {p.name: p.read_bytes() for p in tmp_path.glob("*.json")}
    assert goldens.main(["--update", "--only", key, "--out", str(tmp_path), "--quiet"]) == 0
    after = json.loads(good.read_text())["entries"]
    assert after[key] == right and after[other] == data["entries"][other]
    changed = [n for n, b in before.items() if (tmp_path / n).read_bytes() != b]
    assert changed == [good.name], changed


def test_goldens_files_are_small() -> None:
    sizes = {p.name: p.stat().st_size for p in FOLDER.glob("*.json")}
    assert sizes and sum(sizes.values()) < 600_000, sizes
    for p in FOLDER.glob("*.json"):
        assert json.loads(p.read_text())["header"] == goldens.settings_header()
