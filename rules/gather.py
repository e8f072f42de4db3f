"""gather, gather_nd, index_select and take_along_axis, and the gradient rules of the last two:
values read at positions an index tensor gives.

Described as data: the index's dims map to the result's dims that replace them, x's other dims
keep their shards. gather and index_select by a 1-D index are *masked lookups* where one mesh dim
splits x's axis: each process reads the rows it holds and zeros for the others, so the result is
a pending sum masked by the index's dim (``spmdrules.engine.masks``), as a vocab-parallel
embedding; Paddle gathers the axis whole instead (deviation ``index-select-masked-lookup``). The
other indexed axes (gather_nd, take_along_axis, a 0-D index) are whole.
A gradient scatters the cotangent back into x's rows: where the index (or the cotangent) shards the
positions, each rank's scatter is a piece of a pending sum. Pending sums of the inputs are
resharded first. Negative axes are normalised (Paddle crashes on them: list E, quirk 22).
"""

from __future__ import annotations

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.described import ranks, register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.registry import A, T
from spmdrules.engine.rulekit import normalise_axis

Shape = tuple[int, ...]


def describe_gather(x: Shape, index: Shape, *rest: Shape, axis: int) -> Description:
    """gather / index_select: a 1-D index (0-D for gather) replaces x's axis in the result."""
    if len(index) > 1:
        raise RuleArgumentError(f"'index' has rank {len(index)}; it must be 1-D (or 0-D) positions "
                                "along x's axis")
    xl = letters(len(x))
    ax = normalise_axis("", "x", axis, len(x))
    k = letters(1, xl)
    il = k if index else ""
    out = xl[:ax] + il + xl[ax + 1:]
    whole = frozenset(xl[ax])
    if rest:  # (x, index, out_grad) -> x_grad: rows scattered back, pending over the index's shards
        return Description((xl, il, out), (xl,), whole=whole, merge=(0, 1))
    if il:
        return Description((xl, il), (out,), mask=il)
    return Description((xl, il), (out,), whole=whole, pending=None)


def _gather(x: Shape, index: Shape, *, axis: int) -> Description:
    return describe_gather(x, index, axis=axis)


def _index_select_grad(x: Shape, index: Shape, out_grad: Shape, *, axis: int) -> Description:
    return describe_gather(x, index, out_grad, axis=axis)


def describe_gather_nd(x: Shape, index: Shape) -> Description:
    """index[..., k] holds positions in x's first k dims; the result is index[:-1] + x[k:]."""
    if not index:
        raise RuleArgumentError("'index' is 0-D; its last dim must count the indexed dims of x")
    k = index[-1]
    if k > len(x):
        raise RuleArgumentError(f"'index' last dim is {k} but 'x' has only {len(x)} dims; index at "
                                f"most {len(x)}")
    xl = letters(len(x))
    il = letters(len(index), xl)
    return Description((xl, il), (il[:-1] + xl[k:],), whole=frozenset(xl[:k] + il[-1]),
                       pending=None)


def along_letters(x: Shape, index: Shape, axis: int) -> tuple[str, int]:
    """take_along_axis / put_along_axis: the index's letters (x's, with a '1' where the sizes
    differ off the axis) and the normalised axis."""
    if len(index) != len(x):
        raise RuleArgumentError(f"'index' has rank {len(index)} but 'x' has {len(x)}; give the "
                                "index x's rank")
    ax = normalise_axis("", "x", axis, len(x))
    return "".join("1" if d != ax and x[d] != index[d] else ch
                   for d, ch in enumerate(letters(len(x)))), ax


def describe_take_along_axis(x: Shape, index: Shape, *rest: Shape, axis: int) -> Description:
    """index has x's rank; the result has index's shape. x's axis is whole (the index's axis may
    stay sharded: each of its positions reads the whole row); a dim whose sizes differ is a
    broadcast ('1') dim of both, which keeps its mesh dim from the others, as Paddle merges it."""
    il, ax = along_letters(x, index, axis)
    own = letters(1, il)  # x's axis: a letter of its own, whole
    xl = il[:ax] + own + il[ax + 1:]
    if rest:  # (x, index, out_grad) -> x_grad: the positions scattered back, pending over the
        # cotangent's shards of the axis; x and the index follow the cotangent
        return Description((xl, il, il), (xl,), whole=frozenset(own), merge=(2,),
                           claim_broadcast=True)
    return Description((xl, il), (il,), whole=frozenset(own), pending=None, claim_broadcast=True)


def _take_along_axis(x: Shape, index: Shape, *, axis: int) -> Description:
    return describe_take_along_axis(x, index, axis=axis)


def _take_along_axis_grad(x: Shape, index: Shape, out_grad: Shape, *, axis: int) -> Description:
    return describe_take_along_axis(x, index, out_grad, axis=axis)


AXIS = A("axis", "int", 0)
register_described("gather", _gather, inputs=[T("x"), T("index")], outputs=[T("out")],
                   attrs=[AXIS], key=ranks, doc="GatherInferSpmd: x's axis replicated; the index's dims "
                   "take its place.")
register_described("index_select", _gather, inputs=[T("x"), T("index")], outputs=[T("out")],
                   attrs=[AXIS], key=ranks, doc="IndexSelectInferSpmd: as gather.")
register_described("index_select_grad", _index_select_grad,
                   inputs=[T("x"), T("index"), T("out_grad")], outputs=[T("x_grad")],
                   attrs=[AXIS], reverse=False, key=ranks,
                   doc="IndexSelectGradInferSpmd: rows scattered back; pending over the index's "
                   "mesh dims.")
register_described("gather_nd", describe_gather_nd, inputs=[T("x"), T("index")],
                   outputs=[T("out")], doc="GatherNdInferSpmd: the indexed dims of x replicated.")
register_described("take_along_axis", _take_along_axis, inputs=[T("x"), T("index")],
                   outputs=[T("out")], attrs=[AXIS],
                   doc="TakeAlongAxisInferSpmd: the axis replicated; the result follows the index.")
register_described("take_along_axis_grad", _take_along_axis_grad,
                   inputs=[T("x"), T("index"), T("out_grad")], outputs=[T("x_grad")],
                   attrs=[AXIS], reverse=False,
                   doc="TakeAlongAxisGradInferSpmd: x follows the cotangent; pending over the "
                   "index's sharded axis.")
