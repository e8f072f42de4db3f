"""slice and strided_slice: a box of the input, with steps; its gradient rule.

Described as data: x keeps its letters, the output drops the ``decrease_axis`` letters, and every
sliced axis is whole (its block layout cannot survive an offset or a step). Pending sums are
resharded first (Paddle's choice: the returned attributes carry none). A slice that runs
backwards, a repeated or out-of-range axis, a zero step, lists of different lengths: typed errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.described import ranks, register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.registry import A, T
from spmdrules.engine.rulekit import normalise_axis

Shape = tuple[int, ...]


def boxes(op: str, x: Shape, axes: Sequence[int], starts: Sequence[int], ends: Sequence[int],
          strides: Sequence[int] | None = None) -> dict[int, range]:
    """The global range each sliced axis keeps (Python's slice semantics: negative bounds count
    from the end, bounds past the ends are clamped)."""
    strides = (1,) * len(axes) if strides is None else strides
    if not len(axes) == len(starts) == len(ends) == len(strides):
        raise RuleArgumentError(
            f"axes, starts, ends{', strides' if op == 'strided_slice' else ''} have lengths "
            f"{len(axes)}, {len(starts)}, {len(ends)}{f', {len(strides)}' * (op == 'strided_slice')}"
            "; give one entry per sliced axis")
    out: dict[int, range] = {}
    n = len(x)
    for ax, s, e, st in zip(axes, starts, ends, strides, strict=False):  # lengths checked
        d = ax + n if ax < 0 else ax
        if not 0 <= d < n:
            normalise_axis(op, "input", ax, n)  # raises, naming the valid range
        if d in out:
            raise RuleArgumentError(f"'input' dim {d} is sliced twice (axes {list(axes)}); "
                                    "slice each axis once")
        if st == 0:
            raise RuleArgumentError(f"'input' dim {d} has stride 0; use a non-zero stride")
        lo, hi, step = slice(s, e, st).indices(x[d])
        if (hi - lo) * step < 0:
            raise RuleArgumentError(
                f"'input' dim {d}: start {s} and end {e} (size {x[d]}) run against the stride "
                f"{st}; give end >= start for a positive stride (or an empty range start == end)")
        out[d] = range(lo, hi, step)
    return out


def decreased(x: Shape, decrease: Sequence[int], kept: dict[int, range]) -> set[int]:
    """The dims ``decrease_axis`` drops, each a sliced axis of size 1 in the result."""
    gone = {normalise_axis("", "input", a, len(x)) for a in decrease}
    for d in gone:
        if d not in kept or len(kept[d]) != 1:
            raise RuleArgumentError(f"decrease_axis {d} must be a sliced axis of size 1 in the "
                                    "result; drop it from decrease_axis")
    return gone


def check_slice(x: Shape, axes: Sequence[int], starts: Sequence[int], ends: Sequence[int],
                infer_flags: Sequence[int] = (), decrease_axis: Sequence[int] = ()) -> None:
    """The errors that depend on the sizes (the description itself needs only the rank)."""
    kept = boxes("slice", x, axes, starts, ends)
    if decrease_axis:
        decreased(x, decrease_axis, kept)


def check_strided(x: Shape, *rest: Any) -> None:
    """strided_slice(_grad)'s size-dependent errors; ``rest``: [out_grad,] axes, starts, ends,
    strides."""
    boxes("strided_slice", x, *rest[-4:])


def _described(x: Shape, axes: Sequence[int], decrease: Sequence[int], kept: dict[int, range],
               *, grad: bool = False) -> Description:
    xl = letters(len(x))
    gone = decreased(x, decrease, kept)
    out = "".join(ch for d, ch in enumerate(xl) if d not in gone)
    whole = frozenset(xl[d] for d in kept)
    if grad:  # (input, out_grad) -> input_grad; out_grad's shards are merged first
        return Description((xl, out), (xl,), whole=whole, pending=None, merge=(1, 0))
    return Description((xl,), (out,), whole=whole, pending=None)


def describe_slice(x: Shape, *, axes: Sequence[int], starts: Sequence[int], ends: Sequence[int],
                   decrease_axis: Sequence[int], **_: object) -> Description:
    return _described(x, axes, decrease_axis, boxes("slice", x, axes, starts, ends))


def describe_strided(x: Shape, *maybe_grad: Shape, axes: Sequence[int], starts: Sequence[int],
                     ends: Sequence[int], strides: Sequence[int]) -> Description:
    kept = boxes("strided_slice", x, axes, starts, ends, strides)
    return _described(x, axes, (), kept, grad=bool(maybe_grad))


SLICE_ATTRS = [A("axes", "ints", None), A("starts", "ints", None), A("ends", "ints", None),
               A("infer_flags", "ints", ()), A("decrease_axis", "ints", ())]
STRIDED_ATTRS = [A("axes", "ints", None), A("starts", "ints", None), A("ends", "ints", None),
                 A("strides", "ints", None)]
register_described(
    "slice", describe_slice, inputs=[T("input")], outputs=[T("out")], attrs=SLICE_ATTRS,
    key=ranks, check=check_slice,
    doc="SliceInferSpmd: sliced axes replicated, the others keep their shards.")
register_described(
    "strided_slice", describe_strided, inputs=[T("input")], outputs=[T("out")],
    attrs=STRIDED_ATTRS, key=ranks, check=check_strided, doc="StridedSliceInferSpmd: sliced axes replicated.")
register_described(
    "strided_slice_grad", describe_strided, inputs=[T("input"), T("out_grad")],
    outputs=[T("input_grad")], attrs=STRIDED_ATTRS, reverse=False, key=ranks, check=check_strided,
    doc="StridedSliceGradInferSpmd: input and out_grad merged, sliced axes replicated.")
