"""The search space of one problem: every valid configuration of every template that applies.

Spaces are small enough (hundreds to tens of thousands of configurations) to enumerate once, so
validity masks for the agents are exact: a slot value is allowed under a partial assignment iff
some valid configuration extends it. Enumerating walks every raw combination of a template's
slots (over a million for the row template: seconds), so what needs only membership or a few
random members (`contains`, `draw`: the random search, the defaults) never enumerates.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable

from ..errors import UnsupportedError
from ..ir.graph import HALF_DTYPES
from ..ir.plan import KernelPlan
from .slots import ABSENT, Config, Rendered, Slot, Target, content_key
from .templates import TEMPLATES, Template

SCOPE_SLOT = "reduction.scope"
_ENUMERATED: dict[tuple, list[Config]] = {}
_COUNTED: dict[tuple, int] = {}
"""`len` of spaces not listed, by `Space._enumeration_key`"""


def half_dtypes(plan: KernelPlan) -> str:
    """The half-precision dtypes `plan` reads or writes, for messages ("float16")."""
    g = plan.graph
    found = {gi.dtype for gi in g.inputs} | {plan.out_dtype}
    return ", ".join(d for d in HALF_DTYPES if d in found)


@dataclass
class Space:
    plan: KernelPlan
    target: Target
    templates: list[Template] = field(default_factory=list)
    subset = False
    """True for a space `restricted` to a recorded subset: membership and draws go by its list"""

    @staticmethod
    def for_plan(plan: KernelPlan, target: Target) -> "Space":
        half = plan.graph.has_half()
        templates = [t for t in TEMPLATES if t.applies(plan) and
                     (t.writes_sides or not plan.graph.sides) and
                     (t.writes_permuted or plan.out_perm is None) and
                     (t.takes_half or not half)]
        if not templates:
            if half:
                raise UnsupportedError(f"unsupported: no template takes this {plan.family} "
                                       f"problem in half precision ({half_dtypes(plan)})")
            raise UnsupportedError(f"unsupported: no template covers this {plan.family} problem")
        # a template whose every configuration is invalid here is not offered at all
        probe = Space(plan, target, templates)
        usable = [t for t in templates if next(iter(probe._template_configs(t)), None)]
        return Space(plan, target, usable or templates)

    # -- slots --------------------------------------------------------------------------------
    @cached_property
    def slots(self) -> list[Slot]:
        seen: dict[str, Slot] = {}
        if len(self.templates) > 1:
            seen[SCOPE_SLOT] = Slot(SCOPE_SLOT, tuple(t.name for t in self.templates),
                                    "which template: how work is split over threads and blocks")
        for t in self.templates:
            for s in t.slots(self.plan, self.target):
                if s.name in seen and s.name != SCOPE_SLOT:
                    merged = tuple(dict.fromkeys(seen[s.name].choices + s.choices))
                    seen[s.name] = Slot(s.name, merged, s.doc)
                else:
                    seen[s.name] = s
        return sorted(seen.values(), key=lambda s: s.name)

    def slot(self, name: str) -> Slot:
        for s in self.slots:
            if s.name == name:
                return s
        raise KeyError(name)

    def template_of(self, cfg: Config | dict[str, Any]) -> Template:
        if len(self.templates) == 1:
            return self.templates[0]
        name = cfg[SCOPE_SLOT]
        for t in self.templates:
            if t.name == name:
                return t
        raise KeyError(name)

    # -- enumeration --------------------------------------------------------------------------
    def _raw(self, t: Template) -> Iterable[dict[str, Any]]:
        """Every raw combination of `t`'s own slot values, in itertools.product's order, less
        those under a head of values `t.prefix_excluded` rules out."""
        own = self._own(t)
        names = [s.name for s in own]
        k = t.prefix_slots
        heads = (head for head in itertools.product(*(s.choices for s in own[:k]))
                 if not (k and t.prefix_excluded(self.plan, dict(zip(names, head)),
                                                 self.target)))
        for head in heads:  # head-major, as the product over all the slots
            for tail in itertools.product(*(s.choices for s in own[k:])):
                yield dict(zip(names, head + tail))

    def _template_configs(self, t: Template) -> Iterable[Config]:
        names = [s.name for s in self._own(t)]
        rest = {s.name: ABSENT for s in self.slots if s.name not in names}
        if len(self.templates) > 1:
            rest[SCOPE_SLOT] = t.name
        seen: set[Config] = set()
        order = sorted([*names, *rest])  # Config.of's order, sorted once rather than per config
        for raw in self._raw(t):
            if t.excluded(raw):
                continue
            cfg = t.canonical(self.plan, raw, self.target)
            if t.check(self.plan, cfg, self.target) is not None:
                continue
            merged = {**rest, **cfg}
            full = Config(tuple((k, merged[k]) for k in order)) if len(merged) == len(order) \
                else Config.of(merged)
            if full not in seen:
                seen.add(full)
                yield full

    def _own(self, t: Template) -> list[Slot]:
        return self.__dict__.setdefault("_own_slots", {}).setdefault(
            t.name, t.slots(self.plan, self.target))

    def _valid_raw(self, t: Template, raw: dict[str, Any]) -> bool:
        """Whether `raw` (a value for each of `t`'s own slots, among their choices) is one of
        the configurations `_template_configs` yields: the canonical form of a valid raw
        combination is itself a raw combination, canonical and valid (tests check this
        against enumeration), so a raw combination is a member iff it is its own canonical
        form and valid."""
        return not t.excluded(raw) and t.canonical(self.plan, raw, self.target) == raw and \
            t.check(self.plan, raw, self.target) is None

    def contains(self, cfg: Config) -> bool:
        """`cfg in self.index`, without enumerating the space when it has not been."""
        if self.subset:
            return cfg in self.__dict__["_keep"]
        if "configs" in self.__dict__:
            return cfg in self.index
        try:
            t = self.template_of(cfg)
        except KeyError:
            return False
        d = cfg.as_dict()
        if d.keys() != {s.name for s in self.slots}:
            return False
        own = self._own(t)
        names = {s.name for s in own}
        if any(v != ABSENT for k, v in d.items() if k not in names and k != SCOPE_SLOT):
            return False
        raw = {s.name: d[s.name] for s in own}
        if any(raw[s.name] not in s.choices for s in own):
            return False
        return self._valid_raw(t, raw)

    def draw(self, rng: random.Random, exclude: set[Config] | frozenset = frozenset(),
             tries: int = 20000) -> Config | None:
        """A configuration drawn uniformly from those not in `exclude`, without enumerating
        the space: a raw combination of all templates' slots drawn uniformly, kept if it is a
        member (each member is exactly one raw combination, so members are equally likely).
        None after `tries` rejections in a row (the space nearly exhausted, or its members a
        tiny share of the raw combinations: the caller enumerates instead). A restricted
        space draws from its list."""
        if self.subset:
            pool = [c for c in self.configs if c not in exclude]
            return rng.choice(pool) if pool else None
        radix = [(t, self._own(t)) for t in self.templates]
        sizes = [math.prod(len(s.choices) for s in own) for _, own in radix]
        total = sum(sizes)
        for _ in range(tries):
            k = rng.randrange(total)
            for (t, own), size in zip(radix, sizes):
                if k < size:
                    break
                k -= size
            raw = {}
            for s in reversed(own):  # the last slot varies fastest, as in itertools.product
                k, i = divmod(k, len(s.choices))
                raw[s.name] = s.choices[i]
            raw = {s.name: raw[s.name] for s in own}
            if not self._valid_raw(t, raw):
                continue
            cfg = self._full(t, raw)
            if cfg not in exclude:
                return cfg
        return None

    def _full(self, t: Template, own_values: dict[str, Any]) -> Config:
        rest = {s.name: ABSENT for s in self.slots if s.name not in own_values}
        if len(self.templates) > 1:
            rest[SCOPE_SLOT] = t.name
        return Config.of({**rest, **own_values})

    def at_least(self, n: int) -> int:
        """min(n, len(self)), enumerating only as far as the n-th configuration."""
        if self.subset:
            return min(n, len(self.__dict__["_keep"]))
        if "configs" in self.__dict__:
            return min(n, len(self.configs))
        found = 0
        for t in self.templates:
            for _ in self._template_configs(t):
                found += 1
                if found >= n:
                    return n
        return found

    @cached_property
    def configs(self) -> list[Config]:
        """Every valid configuration, in a deterministic order (enumerated once per process
        for a given computation, target and template set)."""
        if self.subset:
            return [c for c in self.__dict__["_parent"].configs if c in self.__dict__["_keep"]]
        key = self._enumeration_key()
        if key not in _ENUMERATED:
            out: list[Config] = []
            for t in self.templates:
                out.extend(self._template_configs(t))
            if not out:
                raise UnsupportedError("unsupported: no valid configuration for this problem")
            if len(_ENUMERATED) > 64:
                _ENUMERATED.clear()
            _ENUMERATED[key] = out
        return list(_ENUMERATED[key])

    def _enumeration_key(self) -> tuple:
        """What the list of configurations depends on: spaces of the same computation, target
        and templates (a program stage's space and each `StageSpace` over it) share it."""
        return (self.plan.graph.fingerprint(), self.target,
                tuple((t.name, t.version) for t in self.templates))

    def iter_configs(self) -> Iterable[Config]:
        """`configs` one at a time, listed as they are taken where the space is not listed
        yet (a search for the first configuration with some property stops early)."""
        if self.subset or "configs" in self.__dict__:
            return iter(self.configs)
        return (c for t in self.templates for c in self._template_configs(t))

    def configs_of(self, template: str) -> list[Config]:
        """The configurations of one template, in `configs` order; where the space is not
        listed yet, only that template's are (a template of dozens is not held up by one of
        tens of thousands)."""
        if self.subset or "configs" in self.__dict__:
            return [c for c in self.configs if self.template_of(c).name == template]
        t = next((t for t in self.templates if t.name == template), None)
        return list(self._template_configs(t)) if t is not None else []

    def upgrade(self, recorded: dict[str, Any]) -> Config | None:
        """A configuration recorded by an older version of the templates, as a configuration
        of this space: slots added since take their legacy value. None when it has no
        counterpart here (a slot value that no longer exists, a template that was removed)."""
        d = dict(recorded)
        if len(self.templates) == 1:
            t = self.templates[0]
        elif SCOPE_SLOT not in d:
            # recorded when this problem had one template: the one whose slots it names
            t = max(self.templates, key=lambda t: len(
                d.keys() & {s.name for s in t.slots(self.plan, self.target)}))
            d[SCOPE_SLOT] = t.name
        else:
            named = next((t for t in self.templates if t.name == d.get(SCOPE_SLOT)), None)
            if named is None:
                return None
            t = named
        own = {s.name for s in t.slots(self.plan, self.target)}
        for slot in self.slots:
            if slot.name not in d:
                if slot.name in own:
                    if slot.name not in t.legacy:
                        return None
                    d[slot.name] = t.legacy[slot.name]
                else:
                    d[slot.name] = ABSENT
        # in its canonical form: a slot that a later version found to have no effect there
        # (the row loop's unrolling where the loop is unrolled whole) folds onto its twin
        try:
            d.update(t.canonical(self.plan, {k: v for k, v in d.items() if k in own},
                                 self.target))
        except (KeyError, TypeError, ValueError):
            return None
        cfg = Config.of({k: v for k, v in d.items() if k in {s.name for s in self.slots}})
        return cfg if self.contains(cfg) else None

    def restricted(self, keep: list[Config] | set[Config]) -> "Space":
        """The same space limited to `keep` (e.g. the configurations a sweep recorded)."""
        kept = frozenset(c for c in keep if self.contains(c))
        if not kept:
            raise UnsupportedError("no configuration of the space was recorded")
        sub = Space(self.plan, self.target, self.templates)
        sub.subset = True
        # listed (in the space's order) only when something needs the list
        sub.__dict__["_keep"], sub.__dict__["_parent"] = kept, self
        return sub

    @cached_property
    def index(self) -> dict[Config, int]:
        return {c: i for i, c in enumerate(self.configs)}

    def __bool__(self) -> bool:
        # never empty (`for_plan` refuses a problem with no configuration); without this,
        # `space or other` counted the whole space (seconds for a row space of 300k raw
        # combinations, at the end of every tune)
        return True

    def known_len(self) -> int | None:
        """`len(self)` where it is known without counting (listed, or counted before, through
        any space of the same computation); None where it would take counting."""
        if self.subset:
            return len(self.__dict__["_keep"])
        if "configs" in self.__dict__:
            return len(self.configs)
        key = self._enumeration_key()
        if key in _ENUMERATED:
            return len(_ENUMERATED[key])
        return _COUNTED.get(key)

    def __len__(self) -> int:
        known = self.known_len()
        if known is not None:
            return known
        key = self._enumeration_key()
        if key not in _COUNTED:
            # counted without listing: a member is a raw combination that is valid and its
            # own canonical form, so only those are checked, and no configuration is built.
            # Kept per computation: a program's report counted its stage's 600k raw
            # combinations again for each new `StageSpace` over it (seconds each, after the
            # time limit)
            if len(_COUNTED) > 256:
                _COUNTED.clear()
            _COUNTED[key] = sum(self._valid_raw(t, raw) for t in self.templates
                                for raw in self._raw(t))
        return _COUNTED[key]

    def check(self, cfg: Config) -> str | None:
        """Why `cfg` is not in the space (None when it is)."""
        if self.contains(cfg):
            return None
        try:
            t = self.template_of(cfg)
        except KeyError as exc:
            return f"unknown template {exc}"
        d = cfg.as_dict()
        own = {s.name for s in t.slots(self.plan, self.target)}
        for s in t.slots(self.plan, self.target):
            if d.get(s.name) not in s.choices:
                return f"{s.name}={d.get(s.name)!r} not among {s.choices}"
        reason = t.check(self.plan, {k: v for k, v in d.items() if k in own}, self.target)
        return reason or "not canonical (a slot without effect differs from its canonical value)"

    def mask(self, slot: str, partial: dict[str, Any]) -> list[bool]:
        """Which values of `slot` some valid configuration extending `partial` takes."""
        choices = self.slot(slot).choices
        ok = [False] * len(choices)
        pos = {v: i for i, v in enumerate(choices)}
        for cfg in self.configs:
            d = cfg.as_dict()
            if all(d.get(k) == v for k, v in partial.items()):
                v = d[slot]
                if v in pos:
                    ok[pos[v]] = True
        return ok

    def sample(self, n: int, rng: random.Random, exclude: set[Config] | None = None
               ) -> list[Config]:
        pool = [c for c in self.configs if not exclude or c not in exclude]
        return rng.sample(pool, min(n, len(pool)))

    def default(self) -> Config:
        """The untuned baseline: the first template's default that is valid here and does not
        leave most of the GPU idle (`Template.idles_the_gpu`), else the first template's
        default that is valid, else the first valid configuration."""
        defaults = self.template_defaults()
        busy = [c for c in defaults
                if not self.template_of(c).idles_the_gpu(self.plan, self.target)]
        return (busy or defaults or [self._first(self.templates[0]) or self.configs[0]])[0]

    def template_defaults(self, fallback: bool = False) -> list[Config]:
        """Each template's own default, where valid here, in template order; with `fallback`,
        a template whose default is not valid here is represented by its first valid
        configuration instead."""
        out = []
        for t in self.templates:
            cfg = t.canonical(self.plan, t.default(self.plan, self.target), self.target)
            full = self._full(t, cfg)
            if self.contains(full):
                out.append(full)
            elif fallback:
                first = self._first(t)
                if first is not None:
                    out.append(first)
        return out

    def _first(self, t: Template) -> Config | None:
        """The first of `t`'s configurations in the order of `configs`."""
        if self.subset:
            return next((c for c in self.configs if self.template_of(c) is t), None)
        return next(iter(self._template_configs(t)), None)

    # -- rendering ----------------------------------------------------------------------------
    def render(self, cfg: Config) -> Rendered:
        t = self.template_of(cfg)
        own = {s.name for s in t.slots(self.plan, self.target)}
        return t.render(self.plan, {k: v for k, v in cfg.items if k in own}, self.target)

    def key(self, cfg: Config, toolchain: str) -> str:
        """Content key of a candidate: template version, slots, computation, target, compiler."""
        t = self.template_of(cfg)
        return content_key(t.name, t.version, cfg.as_dict(), self.plan.graph.fingerprint(),
                           self.target.key(), toolchain)

    @property
    def version(self) -> str:
        return "+".join(f"{t.name}{t.version}" for t in self.templates)
