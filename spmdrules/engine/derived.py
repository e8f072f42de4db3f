"""Which registered names the engine derives from data, per family: the share README states.

A name counts as derived when both its directions come from the engine reading data: a
Description (``register_described``) or a DimTrans (the shape ops). A name registered with
hand-written forward or reverse functions (``register_rule``) counts as hand-written, whatever
helpers those functions call. ``python -m spmdrules.rules --stats`` prints the table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from spmdrules.engine.registry import get_rule, list_rules

#: what the engine derives a rule from
Derivation = Literal["description", "dim_trans"]

_DERIVED: dict[str, Derivation] = {}


def mark_derived(names: Iterable[str], how: Derivation) -> None:
    """Record that the engine derives the rules of ``names`` from a ``how``."""
    for n in names:
        _DERIVED[n] = how


def derivation(name: str) -> Derivation | None:
    """What the engine derives ``name``'s rule from; None when its functions are hand-written."""
    return _DERIVED.get(name) if get_rule(name) else None


@dataclass(frozen=True, slots=True)
class Share:
    """One family's registered names (aliases included) and how many of them are derived."""

    family: str
    names: int
    derived: int

    @property
    def percent(self) -> float:
        return 100.0 * self.derived / self.names if self.names else 0.0


def shares() -> tuple[list[Share], Share]:
    """Per family, then over every registered name."""
    count: dict[str, list[int]] = {}
    for name in list_rules():
        c = count.setdefault(get_rule(name).family, [0, 0])
        c[0] += 1
        c[1] += name in _DERIVED
    rows = [Share(f, n, d) for f, (n, d) in sorted(count.items())]
    return rows, Share("TOTAL", sum(r.names for r in rows), sum(r.derived for r in rows))


def table() -> str:
    """The shares as a text table, families first, the total last."""
    rows, total = shares()
    lines = [f"{'family':<16} {'names':>5} {'derived':>7} {'share':>6}"]
    lines += [f"{r.family:<16} {r.names:>5} {r.derived:>7} {r.percent:>5.1f}%"
              for r in (*rows, total)]
    return "\n".join(lines)


__all__ = ["Derivation", "Share", "derivation", "mark_derived", "shares", "table"]
