"""Deliberate deviations from Paddle 3.3.1, each a named class with a predicate.

A rule family registers the classes it needs next to its rules. The conformance runner files every
disagreement under the first class whose predicate accepts it; an unfiled disagreement is a bug.
Every class is listed in ``docs/deviations.md`` and proven by an execution test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spmdrules.core.spec import SpmdInfo

#: (case record, our answer or our exception) -> does this class explain the disagreement?
Predicate = Callable[[dict[str, Any], SpmdInfo | BaseException], bool]


@dataclass(frozen=True, slots=True)
class Deviation:
    name: str
    ops: frozenset[str]
    summary: str
    predicate: Predicate

    def explains(self, case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
        return case["op"] in self.ops and self.predicate(case, got)


_DEVIATIONS: dict[str, Deviation] = {}


def register_deviation(
    name: str, ops: set[str] | frozenset[str], summary: str, predicate: Predicate
) -> Deviation:
    dev = Deviation(name, frozenset(ops), summary, predicate)
    if name in _DEVIATIONS:
        raise ValueError(f"deviation class {name!r} is registered twice")
    _DEVIATIONS[name] = dev
    return dev


def deviations() -> list[Deviation]:
    return list(_DEVIATIONS.values())


def classify(case: dict[str, Any], got: SpmdInfo | BaseException) -> str | None:
    """The name of the deviation class that explains this disagreement, or None."""
    for dev in deviations():
        if dev.explains(case, got):
            return dev.name
    return None
