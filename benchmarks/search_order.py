"""The strict-precision search runs in the order they ran (a problem's latest search counts).

Folder names sort by date only, so the runs before rows carried their own time are listed in
benchmarks/results/search-order.txt; a run not listed there is placed after them by its rows'
"finished" times (`gpu_suite.py` writes one into every search row).
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
ORDER = "search-order.txt"


def search_files(results: Path = RESULTS) -> list[Path]:
    """Every `<run>/search.json` under `results`, earliest run first. Raises ValueError for a
    listed run that is missing, or an unlisted one whose rows do not say when they ran."""
    listed = [line.strip() for line in (results / ORDER).read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    found = {f.parent.name: f for f in results.glob("*/search.json")}
    missing = [name for name in listed if name not in found]
    if missing:
        raise ValueError(f"{results / ORDER} lists runs with no search.json: {missing}")
    later = []
    for name in sorted(set(found) - set(listed)):
        times = [r.get("finished") for r in json.loads(found[name].read_text())]
        if not times or None in times:
            raise ValueError(f"search run {name} is not in {results / ORDER} and its rows "
                             "carry no 'finished' time: add it to the list in run order")
        later.append((max(times), name))
    return [found[name] for name in listed] + [found[name] for _, name in sorted(later)]
