"""The deviations of the fused linear rules (linear_v2, fused_gemm_epilogue) from Paddle 3.3.1."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.deviation import register_deviation
from spmdrules.core.attr import DistAttr
from spmdrules.core.spec import SpmdInfo


def _norm(e: dict[str, Any]) -> tuple[Any, Any]:
    mdm = e.get("multi_dims_mapping")
    m = tuple(tuple(d) for d in mdm) if mdm else tuple(() if d < 0 else (d,) for d in e["dims_mapping"])
    return m, tuple(sorted((int(k), v) for k, v in e.get("partial", {}).items()))


def _swap(s: tuple[int, ...], flag: bool) -> tuple[int, ...]:
    return (*s[:-2], s[-1], s[-2]) if flag and len(s) >= 2 else s


def _out_shape(case: dict[str, Any]) -> tuple[int, ...]:
    x, y = (tuple(t["shape"]) for t in case["inputs"][:2])
    a = case["attrs"]
    xs, ys = _swap(x, a.get("trans_x", False)), _swap(y, a.get("trans_y", False))
    return (*xs[:-1], ys[-1])


def _size_one_shards(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """Ours equals Paddle's except at size-1 dims (of out and bias) that ours replicate."""
    exp = case["expected"]
    if not isinstance(got, SpmdInfo) or "error" in exp:
        return False
    shapes = [tuple(t["shape"]) for t in case["inputs"]] + [_out_shape(case), ()]
    pairs = list(zip([*exp["inputs"], *exp["outputs"]], [*got.inputs, *got.outputs], strict=False))
    if len(pairs) != len(shapes) or len(exp["inputs"]) != len(got.inputs):
        return False
    differs = False
    for (e, g), shape in zip(pairs, shapes, strict=True):
        if g is None:
            if e.get("process_mesh", 0) is not None:
                return False
            continue
        if not isinstance(g, DistAttr):
            return False
        em, ep = _norm(e)
        om, op = g.multi_dims_mapping, g.partial_items
        if ep != op or len(em) != len(om):
            return False
        for ed, od, n in zip(em, om, shape, strict=False):
            if ed != od:
                if od or n != 1:
                    return False
                differs = True
    return differs


register_deviation(
    "fused-linear-size-one-output-shard", {"linear_v2", "fused_gemm_epilogue"},
    "A size-1 dim of the output (and the bias) is replicated, as Paddle already does for the "
    "operands; Paddle keeps the letter's mesh dim there, which the local products (computed from "
    "replicated operands) do not produce: the blocks do not tile.",
    _size_one_shards,
)
