"""A captured `Graph` as plain JSON data and back, exactly: what the capture cache keeps on disk.

Unlike a pickle, decoding runs no code: it builds only the IR's own dataclasses (`Graph`, `Node`,
`GraphInput`, `RunningStats`, `Increment`) from JSON values, and anything else is an error. The
encoding is explicit where JSON is not: tuples (shapes, attrs, ranges) are `{"tuple": [...]}`,
floats that JSON cannot hold (inf, nan) `{"float": "inf"}`, and each dataclass
`{"class": name, "fields": {...}}`; dtypes are the IR's own strings. A value of any other type
(an enum, a numpy scalar, a tensor) cannot be encoded: `encode` raises `TypeError`, and the
capture cache keeps no entry rather than one that would decode to something else.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .graph import Graph, GraphInput, Increment, Node, RunningStats

_CLASSES: dict[str, type] = {c.__name__: c for c in (Graph, Node, GraphInput, RunningStats,
                                                     Increment)}


def encode(graph: Graph) -> dict[str, Any]:
    """`graph` as JSON-ready data (`decode` gives back an equal graph)."""
    return _encode(graph)


def decode(data: Any) -> Graph:
    """The graph `encode` made; `ValueError` for anything that is not such data."""
    graph = _decode(data)
    if not isinstance(graph, Graph):
        raise ValueError("not an encoded Graph")
    return graph


def _encode(value: Any) -> Any:
    kind = type(value)  # exact types: a subclass (an IntEnum, a bool-like) would not come back
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if kind is tuple:
        return {"tuple": [_encode(v) for v in value]}
    if kind is list:
        return [_encode(v) for v in value]
    if _CLASSES.get(kind.__name__) is kind:
        names = [f.name for f in dataclasses.fields(value)]
        if set(vars(value)) != set(names):  # an attribute set beside the fields would be lost
            raise TypeError(f"the graph codec cannot encode a {kind.__name__} with attributes "
                            f"{sorted(set(vars(value)) - set(names))} beside its fields")
        return {"class": kind.__name__,
                "fields": {name: _encode(getattr(value, name)) for name in names}}
    raise TypeError(f"the graph codec cannot encode a {kind.__qualname__} ({value!r:.60})")


def _decode(value: Any) -> Any:
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) is list:
        return [_decode(v) for v in value]
    if type(value) is not dict:
        raise ValueError(f"unexpected {type(value).__name__} in an encoded graph")
    if set(value) == {"tuple"} and type(value["tuple"]) is list:
        return tuple(_decode(v) for v in value["tuple"])
    if set(value) == {"float"} and value["float"] in ("inf", "-inf", "nan"):
        return float(value["float"])
    if set(value) == {"class", "fields"} and value["class"] in _CLASSES \
            and type(value["fields"]) is dict:
        cls = _CLASSES[value["class"]]
        names = {f.name for f in dataclasses.fields(cls)}
        if set(value["fields"]) != names:
            raise ValueError(f"an encoded {cls.__name__} with fields "
                             f"{sorted(value['fields'])}, expected {sorted(names)}")
        return cls(**{k: _decode(v) for k, v in value["fields"].items()})
    raise ValueError(f"unexpected object {sorted(value)[:4]} in an encoded graph")
