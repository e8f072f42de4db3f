"""scatter, scatter_nd_add, put_along_axis and index_put, and the gradient rules of the last two:
values written (or reduced) into x at positions an index gives.

Described as data: x's indexed dims are whole, and so are the index's (and the updates') dims
that enumerate the positions: split over ranks, each rank would write its positions into its own
full copy of x, and no reduction joins copies of x with rows written (an overwrite) or with x
counted once per rank (an add). The other dims pass between x, the updates and the result, and
follow the updates (Paddle's merge). Pending sums are resharded first.
"""

from __future__ import annotations

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.registry import A, T, Vec

from .gather import along_letters

Shape = tuple[int, ...]


def describe_scatter(x: Shape, index: Shape, updates: Shape, **_: object) -> Description:
    """index [K] picks rows of x's dim 0; updates [K, *x[1:]]."""
    if len(index) != 1 or not x:
        raise RuleArgumentError(f"'index' has rank {len(index)}; scatter takes 1-D row positions "
                                "into x's dim 0")
    xl = letters(len(x))
    k = letters(1, xl)
    return Description((xl, k, k + xl[1:]), (xl,), whole=frozenset(xl[0] + k), pending=None,
                       merge=(1, 2))


def describe_scatter_nd_add(x: Shape, index: Shape, updates: Shape) -> Description:
    """index [*B, k] holds positions in x's first k dims; updates [*B, *x[k:]]."""
    if not index or index[-1] > len(x):
        raise RuleArgumentError(f"'index' last dim must count at most rank(x) = {len(x)} indexed "
                                f"dims, got shape {list(index)}")
    k = index[-1]
    xl = letters(len(x))
    bl = letters(len(index), xl)
    return Description((xl, bl, bl[:-1] + xl[k:]), (xl,), whole=frozenset(xl[:k] + bl),
                       pending=None, merge=(1, 2))


def describe_put_along_axis(x: Shape, index: Shape, value: Shape, *grad: Shape, axis: int,
                            **_: object) -> Description:
    """index and value share a shape (of x's rank); along ``axis`` they name rows of x."""
    il, ax = along_letters(x, index, axis)
    own = letters(2, il)
    xl = il[:ax] + own[0] + il[ax + 1:]
    il = il[:ax] + own[1] + il[ax + 1:]
    if len(value) != len(index):
        raise RuleArgumentError(f"'value' has rank {len(value)} but 'index' has {len(index)}; "
                                "give value the index's rank")
    vl = "".join(ch if n == m else "1" for ch, n, m in zip(il, value, index, strict=True))
    whole = frozenset(own)
    if grad:  # (x, index, value, out, out_grad) -> (x_grad, value_grad): all follow out_grad,
        # whose axis and mismatched dims are Paddle's shared '1' (two shards of them conflict)
        gl = xl[:ax] + "1" + xl[ax + 1:]
        return Description((gl, il, vl, gl, gl), (gl, vl), whole=whole, pending=None,
                           merge=(4,), claim_broadcast=True)
    return Description((xl, il, vl), (xl,), whole=whole, pending=None, claim_broadcast=True)


def describe_index_put(x: Shape, indices: tuple[Shape, ...], value: Shape, *grad: Shape,
                       **_: object) -> Description:
    """indices: one 1-D tensor per leading dim of x; value broadcasts to [N, *x[k:]]."""
    k = len(indices)
    if not 0 < k <= len(x):
        raise RuleArgumentError(f"'indices' has {k} tensors for 'x' of rank {len(x)}; give 1 to "
                                f"{len(x)} (one per indexed leading dim)")
    xl = letters(len(x))
    nl = letters(1, xl)
    il = tuple(letters(len(s), xl + nl) for s in indices)
    target = (max((s[0] for s in indices if s), default=1), *x[k:])
    tl = nl + xl[k:]
    off = len(target) - len(value)
    if off < 0:
        raise RuleArgumentError(f"'value' has rank {len(value)} but the indexed rows are "
                                f"{list(target)}; give value a shape that broadcasts to them")
    # a value of lower rank than the rows broadcasts, and is replicated (as Paddle lays it out)
    vl = ("".join(tl[off + i] if n == target[off + i] else "1" for i, n in enumerate(value))
          if not off else "1" * len(value))
    whole = frozenset(xl[:k] + nl + "".join(il))
    if grad:  # (x, indices, value, out_grad) -> (x_grad, value_grad), following x; the value's
        # cotangent sums the rows it broadcasts over, so x keeps those dims whole
        whole |= frozenset(xl[k:]) - frozenset(vl)
        return Description((xl, il, vl, xl), (xl, vl), whole=whole, pending=None, merge=(0,))
    return Description((xl, il, vl), (xl,), whole=whole, pending=None, merge=(0,))


OVERWRITE = A("overwrite", "bool", True)
PUT = [A("axis", "int", 0), A("reduce", "str", "assign"), A("include_self", "bool", True)]
ACCUMULATE = A("accumulate", "bool", False)
register_described("scatter", describe_scatter, inputs=[T("x"), T("index"), T("updates")],
                   outputs=[T("out")], attrs=[OVERWRITE],
                   doc="x with rows at `index` replaced by (or, overwrite=False, set to the sum "
                   "of) updates' rows: rows replicated, the other dims follow the updates.")
register_described("scatter_nd_add", describe_scatter_nd_add,
                   inputs=[T("x"), T("index"), T("updates")], outputs=[T("out")],
                   doc="x plus updates added at index[..., :k]: indexed dims replicated.")
register_described("put_along_axis", describe_put_along_axis,
                   inputs=[T("x"), T("index"), T("value")], outputs=[T("out")], attrs=PUT,
                   doc="PutAlongAxisInferSpmd: the axis replicated in x and the index.")
register_described("put_along_axis_grad", describe_put_along_axis,
                   inputs=[T("x"), T("index"), T("value"), T("out"), T("out_grad")],
                   outputs=[T("x_grad"), T("value_grad")], attrs=PUT, reverse=False,
                   doc="PutAlongAxisGradInferSpmd: all five merged; the axis whole.")
register_described("index_put", describe_index_put,
                   inputs=[T("x"), Vec("indices"), T("value")], outputs=[T("out")],
                   attrs=[ACCUMULATE],
                   doc="IndexPutInferSpmd: the indexed dims replicated; value follows x.")
register_described("index_put_grad", describe_index_put,
                   inputs=[T("x"), Vec("indices"), T("value"), T("out_grad")],
                   outputs=[T("x_grad"), T("value_grad")], attrs=[ACCUMULATE], reverse=False,
                   doc="IndexPutGradInferSpmd: everything follows x; indexed dims whole.")
