"""roll and its gradient rule: x shifted cyclically along some axes (the flattened x when
``axis`` is empty).

Described as data: a rolled axis is whole (a block's values come from another block), the others
keep their shards; with no axis every dim is whole. Pending sums are resharded first.
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.registry import A, T
from spmdrules.engine.rulekit import normalise_axis


def rolled_axes(x: tuple[int, ...], shifts: Sequence[int], axis: Sequence[int]) -> list[int]:
    if not axis:
        if len(shifts) != 1:
            raise RuleArgumentError(f"shifts has {len(shifts)} entries but no axis is given; roll "
                                    "the flattened x by one shift, or give one axis per shift")
        return list(range(len(x)))
    if len(shifts) != len(axis):
        raise RuleArgumentError(f"shifts has {len(shifts)} entries and axis {len(axis)}; give one "
                                "shift per axis")
    return [normalise_axis("", "x", a, len(x)) for a in axis]


def describe_roll(x: tuple[int, ...], *grad: tuple[int, ...], shifts: Sequence[int],
                  axis: Sequence[int]) -> Description:
    xl = letters(len(x))
    whole = frozenset(xl[d] for d in rolled_axes(x, shifts, axis))
    if grad:  # (x, out_grad) -> x_grad
        return Description((xl, xl), (xl,), whole=whole, pending=None)
    return Description((xl,), (xl,), whole=whole, pending=None)


ATTRS = [A("shifts", "ints", None), A("axis", "ints", ())]
register_described("roll", describe_roll, inputs=[T("x")], outputs=[T("out")], attrs=ATTRS,
                   doc="RollInferSpmd: rolled axes replicated (every dim when axis is empty).")
register_described("roll_grad", describe_roll, inputs=[T("x"), T("out_grad")],
                   outputs=[T("x_grad")], attrs=ATTRS, reverse=False,
                   doc="RollGradInferSpmd: x and out_grad merged, rolled axes replicated.")
