"""topk and argsort, and their gradient rules: each row along one axis sorted (or its top k).

Described as data: the sorted axis is whole (a row's order needs the whole row), the others keep
their shards; the values and the indices share the layout. Pending sums are resharded first.
argsort's gradient rule requires the indices laid out as x (Paddle checks it and raises).
"""

from __future__ import annotations

from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description, infer_forward, letters
from spmdrules.engine.registry import A, T, register_rule
from spmdrules.engine.rulekit import normalise_axis

Shape = tuple[int, ...]


def describe_sort(x: Shape, *rest: Shape, axis: int, k: int | None = None, n_out: int = 2,
                  merge: tuple[int, ...] | None = None) -> Description:
    xl = letters(len(x))
    ax = normalise_axis("", "x", axis, len(x) or 1)
    if k is not None and not 0 <= k <= (x[ax] if x else 1):
        raise RuleArgumentError(f"k {k} is out of range for 'x' dim {ax} of size "
                                f"{x[ax] if x else 1}; use 0..{x[ax] if x else 1}")
    whole = frozenset(xl[ax]) if x else frozenset()
    return Description((xl,) * (1 + len(rest)), (xl,) * n_out, whole=whole, pending=None,
                       merge=merge, names=("indices", "x", "out_grad", "x_grad") if merge else ())


def _topk(x: Shape, *, k: int, axis: int, **_: object) -> Description:
    return describe_sort(x, axis=axis, k=k)


def _topk_grad(x: Shape, indices: Shape, out_grad: Shape, *, k: int, axis: int, **_: object
               ) -> Description:
    return describe_sort(x, indices, out_grad, axis=axis, k=k, n_out=1)


def _argsort(x: Shape, *, axis: int, **_: object) -> Description:
    return describe_sort(x, axis=axis)


def argsort_grad(indices: TensorSpec, x: TensorSpec, out_grad: TensorSpec, axis: int,
                 descending: bool, stable: bool) -> SpmdInfo:
    for d, (a, b) in enumerate(zip(x.attr.multi_dims_mapping, indices.attr.multi_dims_mapping,
                                   strict=False)):
        if a != b:
            raise RuleArgumentError(
                f"'x' dim {d} is sharded on mesh dims {list(a)} but 'indices' dim {d} on {list(b)}; "
                "lay out the indices as x (they come from the same argsort)")
    # Paddle lays out out_grad as x and indices, whatever its own shards
    desc = describe_sort(x.shape, indices.shape, out_grad.shape, axis=axis, n_out=1, merge=(0, 1))
    return infer_forward(desc, (indices, x, out_grad))


TOPK = [A("k", "int", 1), A("axis", "int", -1), A("largest", "bool", True),
        A("sorted", "bool", True)]
ARGSORT = [A("axis", "int", -1), A("descending", "bool", False), A("stable", "bool", False)]
register_described("topk", _topk, inputs=[T("x")], outputs=[T("out"), T("indices")], attrs=TOPK,
                   doc="TopkInferSpmd: the axis replicated; values and indices alike.")
register_described("topk_grad", _topk_grad, inputs=[T("x"), T("indices"), T("out_grad")],
                   outputs=[T("x_grad")], attrs=TOPK, reverse=False,
                   doc="TopkGradInferSpmd: x, indices and out_grad merged, the axis whole.")
register_described("argsort", _argsort, inputs=[T("x")], outputs=[T("out"), T("indices")],
                   attrs=ARGSORT, doc="ArgSortInferSpmd: the axis replicated.")
register_rule("argsort_grad", forward=argsort_grad,
              inputs=[T("indices"), T("x"), T("out_grad")], outputs=[T("x_grad")], attrs=ARGSORT,
              doc="ArgSortGradInferSpmd: indices laid out as x; merged, the axis whole.")
