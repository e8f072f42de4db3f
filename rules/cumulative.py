"""cumsum, cummax and cummin, and the gradient rules of the last two: scans along one axis.

Described as data: the scanned axis is whole (each position needs every one before it), the others
keep their shards; ``flatten`` scans the flattened tensor, so every dim is whole and the result is
1-D. Pending sums are resharded first (Paddle's choice). The scan of a sharded axis is never split
across ranks: the rule replicates it, and the kernel refuses a block that cuts it.
"""

from __future__ import annotations

from spmdrules.engine.described import ranks, register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.registry import A, T
from spmdrules.engine.rulekit import normalise_axis


def describe_scan(x: tuple[int, ...], *rest: tuple[int, ...], axis: int, flatten: bool = False,
                  n_out: int = 1) -> Description:
    xl = letters(len(x))
    if flatten:
        flat = letters(1, xl)
        return Description((xl,), (flat,), whole=frozenset(xl + flat), pending=None)
    whole = frozenset(xl[normalise_axis("", "x", axis, len(x))]) if x else frozenset()
    return Description((xl,) * (1 + len(rest)), (xl,) * n_out, whole=whole, pending=None)


def _cumsum(x: tuple[int, ...], *, axis: int, flatten: bool, **_: object) -> Description:
    return describe_scan(x, axis=axis, flatten=flatten)


def _cumext(x: tuple[int, ...], *, axis: int, **_: object) -> Description:
    return describe_scan(x, axis=axis, n_out=2)


def _cumext_grad(x: tuple[int, ...], indices: tuple[int, ...], out_grad: tuple[int, ...], *,
                 axis: int, **_: object) -> Description:
    return describe_scan(x, indices, out_grad, axis=axis)


register_described(
    "cumsum", _cumsum, inputs=[T("x")], outputs=[T("out")],
    attrs=[A("axis", "int", -1), A("flatten", "bool", False), A("exclusive", "bool", False),
           A("reverse", "bool", False)], key=ranks,
    doc="CumSumInferSpmd: the scanned axis replicated (every dim when flatten).")
for _name in ("cummax", "cummin"):
    _attrs = [A("axis", "int", -1), A("dtype", "dtype", "int64")]
    register_described(_name, _cumext, inputs=[T("x")], outputs=[T("out"), T("indices")],
                       attrs=_attrs, key=ranks, doc="CummaxInferSpmd: the scanned axis replicated.")
    register_described(f"{_name}_grad", _cumext_grad,
                       inputs=[T("x"), T("indices"), T("out_grad")], outputs=[T("x_grad")],
                       attrs=_attrs, reverse=False, key=ranks,
                       doc="CummaxGradInferSpmd: x, indices and out_grad merged, the axis whole.")
