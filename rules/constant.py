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

from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine.registry import A, T, register_rule


def placed(out: TensorSpec, *_: object) -> SpmdInfo:
    """A constant with no tensor input, reversed: the result as its consumer needs it."""
    return SpmdInfo((), (out.attr.without_partial(),))


def unplaced(*_: object) -> SpmdInfo:
    return SpmdInfo((), (None,))


def full_like_forward(x: TensorSpec, *_: object) -> SpmdInfo:
    return SpmdInfo((x.attr,), (x.attr.without_partial(),))


def full_like_reverse(x: TensorSpec, out: TensorSpec, *_: object) -> SpmdInfo:
    return SpmdInfo((x.attr,), (out.attr.without_partial(),))


# An int value stays an int (a "number"), so an int64 constant is exact.
VALUE = A("value", "number", 0.0)
register_rule(
    "full", forward=unplaced, reverse=placed, inputs=[], outputs=[T("out")],
    attrs=[A("shape", "ints", None), VALUE, A("dtype", "dtype", "float32")],
    doc="A tensor of `shape` filled with `value`: placed as its consumer needs, else replicated.",
)
register_rule(
    "full_like", forward=full_like_forward, reverse=full_like_reverse, inputs=[T("x")],
    outputs=[T("out")], attrs=[VALUE, A("dtype", "dtype", "")],
    doc="x's shape filled with `value` (dtype '' keeps x's): takes x's dims, or its consumer's.",
)
register_rule(
    "arange", forward=unplaced, reverse=placed, inputs=[], outputs=[T("out")],
    attrs=[A("start", "number", 0.0), A("end", "number", None), A("step", "number", 1.0),
           A("dtype", "dtype", "")],
    doc="start, start+step, ... before end (dtype '': int64 when all three are integral, else "
    "float32): placed as its consumer needs, else replicated.",
)
