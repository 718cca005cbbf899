"""Templates a search gives up on: every candidate measured so far wrong, none verified.

A template whose candidates fail verification usually fails it at every configuration: its
arithmetic is less precise than the tolerance allows (TF32 tensor cores where torch's own
convolution ran an fp32 algorithm, so the floor is fp32's), or it mishandles the problem; a
search that keeps proposing it spends its measurements on nothing (docs/journal.md:
search/verdicts.py). After `WRONG_BEFORE_ABANDON` wrong candidates of a template and none
verified, the search proposes none of it again (`tuner.StrategyProposer`), unless it is the
last template of the space not given up on (a failure that depends on one slot, fast math say,
must not end the search); one verified candidate keeps the template in the search for good.
"""

from __future__ import annotations

from ..runner.records import Measurement

#: wrong candidates of a template, none verified, after which the search stops proposing it
WRONG_BEFORE_ABANDON = 3

TemplateKey = tuple[int | None, str, tuple]
"""a template: the program stage it serves (None for a one-kernel problem), its name, and the
other stages' configurations it was measured beside (a program is verified whole: a wrong
program may be another stage's doing, so a verdict holds only beside the same others)"""


class TemplateVerdicts:
    """Per template key (a template's name, with the program stage it belongs to), how many
    measured candidates verified and how many were wrong."""

    def __init__(self, limit: int = WRONG_BEFORE_ABANDON) -> None:
        self.limit = limit
        self._wrong: dict[TemplateKey, int] = {}
        self._verified: set[TemplateKey] = set()

    def note(self, key: TemplateKey, m: Measurement) -> bool:
        """Count `m`; whether this measurement is the one that gives `key` up."""
        if m.ok and m.verified is not False:  # (the simulator claims no verification)
            self._verified.add(key)
        elif m.error_kind == "wrong":
            self._wrong[key] = self._wrong.get(key, 0) + 1
            return self._wrong[key] == self.limit and self.abandoned(key)
        return False

    def abandoned(self, key: TemplateKey) -> bool:
        return key not in self._verified and self._wrong.get(key, 0) >= self.limit

    def given_up(self) -> list[TemplateKey]:
        """The keys abandoned so far (for the report)."""
        return sorted((k for k in self._wrong if self.abandoned(k)), key=str)
