"""What differs between stored goldens and goldens computed now, one line per difference,
naming the problem, the space (contract and stage), the template and the configuration
(`goldens.py` computes and stores them)."""

from __future__ import annotations

from typing import Any, Iterator


class Labels(dict[str, str]):
    """Configuration hash -> readable configuration (`Config.short()`), for messages only."""


def _expand(entry: Any) -> Any:
    """A problem's entry with "=fp32" markers replaced by what they stand for."""
    if not isinstance(entry, dict) or "precisions" not in entry:
        return entry
    by = dict(entry["precisions"])
    for p, v in by.items():
        if isinstance(v, str) and v.startswith("="):
            by[p] = by[v[1:]]
    return {**entry, "precisions": by}


def _walk(path: list[str], golden: Any, now: Any) -> Iterator[tuple[list[str], Any, Any]]:
    """(path, golden, now) of every leaf that differs; templates are matched by name, spaces
    and stages by position, a rendering's hashes are one leaf."""
    if golden == now:
        return
    if isinstance(golden, dict) and isinstance(now, dict):
        for k in sorted(set(golden) | set(now)):
            yield from _walk(path + [k], golden.get(k, "<absent>"), now.get(k, "<absent>"))
    elif isinstance(golden, list) and isinstance(now, list) and all(
            isinstance(x, dict) and "name" in x for x in golden + now) and (golden or now):
        g, n = {x["name"]: x for x in golden}, {x["name"]: x for x in now}
        if list(g) != list(n):
            yield path + ["order"], list(g), list(n)
        for k in [*g, *(k for k in n if k not in g)]:
            yield from _walk(path[:-1] + [f"template {k}"], g.get(k, "<absent>"),
                             n.get(k, "<absent>"))
    elif isinstance(golden, list) and isinstance(now, list) and (
            path[-1:] in (["renders"], ["programs"])
            or any(isinstance(x, dict) for x in golden + now)):
        for i in range(max(len(golden), len(now))):
            gi = golden[i] if i < len(golden) else "<absent>"
            ni = now[i] if i < len(now) else "<absent>"
            if path[-1:] in (["renders"], ["programs"]):
                if gi != ni:
                    yield path + [str(i)], gi, ni
            else:  # "spaces" 0 -> "space 0"
                yield from _walk(path[:-1] + [f"{path[-1].rstrip('s')} {i}"], gi, ni)
    else:
        yield path, golden, now


RENDER_PARTS = ("configuration drawn", "rendered source", "launches/workspace/facts")


def describe(key: str, where: list[str], golden: Any, now: Any, labels: Labels) -> str:
    """One line: which problem, which space, which configuration, what changed."""
    where = [w for w in where if w != "precisions"]
    place = " ".join(where)
    if len(where) >= 2 and where[-2] in ("renders", "programs") and isinstance(now, list) \
            and isinstance(golden, list):
        configs = now[0] if isinstance(now[0], list) else [now[0]]
        cfg = "; ".join(f"[{labels.get(c, c)}]" for c in configs)
        parts = [RENDER_PARTS[j] for j in range(max(len(golden), len(now)))
                 if (golden[j:j + 1] or [None]) != (now[j:j + 1] or [None])]
        what = "stage choices" if where[-2] == "programs" else "configuration"
        return (f"{key}: {' '.join(where[:-2])} {where[-2][:-1]} #{where[-1]}, {what} {cfg}: "
                f"{', '.join(parts)} changed (golden {golden}, now {now})")
    return f"{key}: {place}: golden {golden!r}, now {now!r}"


def differences(golden: dict[str, Any], now: dict[str, Any], labels: Labels) -> list[str]:
    """What differs between two groups of entries, one line each (keys missing on either side
    included)."""
    out = []
    for key in sorted(set(golden) | set(now)):
        if key not in golden:
            out.append(f"{key}: not in the goldens (new)")
        elif key not in now:
            out.append(f"{key}: in the goldens, not computed now (removed)")
        else:
            for where, g, n in _walk([], _expand(golden[key]), _expand(now[key])):
                out.append(describe(key, where, g, n, labels))
    return out


def replay_differences(golden: dict[str, Any], now: dict[str, Any]) -> list[str]:
    out = []
    for key in sorted(set(golden) | set(now)):
        g, n = golden.get(key), now.get(key)
        if g == n:
            continue
        if g is None or n is None:
            out.append(f"replay {key}: {'not in the goldens' if g is None else 'not run now'}")
            continue
        i = next((i for i, (a, b) in enumerate(zip(g, n)) if a != b), min(len(g), len(n)))
        out.append(f"replay {key}: the measured order differs from measurement {i} "
                   f"(golden {g[i:i + 3]}..., now {n[i:i + 3]}...; {len(g)} and {len(n)} "
                   "measured)")
    return out
