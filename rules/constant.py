"""full / full_like / arange: constants, which read no tensor's values.

A constant's kernel fills whatever block of its result a rank holds, so the result can take any
layout without communication. Its rule therefore places it as its consumer needs: the reverse rule
gives the result the attribute asked of it, without a pending reduction (a constant is complete on
every rank). Forward inference has no input to go on, so ``full`` and ``arange`` answer ``None``
for their result ("unplaced"), and the completion pass places an unplaced result that no consumer
asks anything of replicated on the op's mesh. ``full_like`` reads only x's shape: its result takes
x's dims (without x's pending reduction), and x keeps its own attribute, since none of its values
is needed.
"""

from __future__ import annotations

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.described import ranks, register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.policy import Policy
from spmdrules.engine.registry import A, T

#: full_like reads only x's shape: x keeps its own attribute, pending results included
SHAPE_ONLY = Policy(unread=(0,))


def full(*, shape: tuple[int, ...] | None, **_: object) -> Description:
    """No input, a result of ``shape``'s rank, placed by its consumer."""
    if shape is None:
        raise RuleArgumentError("attribute 'shape' is required: give the constant's sizes")
    return Description((), (letters(len(shape)),))


def arange() -> Description:
    return Description((), ("a",))


def full_like(x: tuple[int, ...]) -> Description:
    ls = letters(len(x))
    return Description((ls,), (ls,), policy=SHAPE_ONLY)


# An int value stays an int (a "number"), so an int64 constant is exact.
VALUE = A("value", "number", 0.0)
register_described(
    "full", full, inputs=[], outputs=[T("out")], key=ranks,
    attrs=[A("shape", "ints", None), VALUE, A("dtype", "dtype", "float32")],
    doc="A tensor of `shape` filled with `value`: placed as its consumer needs, else replicated.",
)
register_described(
    "full_like", full_like, inputs=[T("x")], outputs=[T("out")], key=ranks,
    attrs=[VALUE, A("dtype", "dtype", "")],
    doc="x's shape filled with `value` (dtype '' keeps x's): takes x's dims, or its consumer's.",
)
register_described(
    "arange", arange, inputs=[], outputs=[T("out")], key=ranks,
    attrs=[A("start", "number", 0.0), A("end", "number", None), A("step", "number", 1.0),
           A("dtype", "dtype", "")],
    doc="start, start+step, ... before end (dtype '': int64 when all three are integral, else "
    "float32): placed as its consumer needs, else replicated.",
)
