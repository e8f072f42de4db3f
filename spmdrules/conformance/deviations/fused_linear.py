"""The deviations of the fused linear rules (linear_v2, fused_gemm_epilogue,
fused_linear_param_grad_add) from Paddle 3.3.1."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.calls import agrees, build_call
from spmdrules.conformance.deviation import register_deviation, rule_module
from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError
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


_rules = rule_module("fused_linear")


def _keeps_uneven(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """Paddle's answer is ours under matmul's even policy (uneven letters replicated)."""
    if case["direction"] != "forward" or "error" in case["expected"]:
        return False
    return _paddle_variant(case, even=True) and not agrees(case, got)


def _paddle_variant(case: dict[str, Any], **variant: bool) -> bool:
    """Does our rule, with Paddle's choices ``variant``, give Paddle's answer (or error)?"""
    _, _, args, attrs = build_call(case)
    rule = (_rules.fused_gemm_epilogue_forward if case["op"] == "fused_gemm_epilogue"
            else _rules.fused_linear_param_grad_add_forward)
    try:
        paddle: SpmdInfo | BaseException = rule(*args, **attrs, **variant)
    except SpmdError as e:
        paddle = e
    return agrees(case, paddle)


def _merged_k(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    if case["direction"] != "forward" or agrees(case, got):
        return False
    return _paddle_variant(case, merged_k=True)


register_deviation(
    "fused-gemm-size-one-k-pending", {"fused_gemm_epilogue"},
    "A k of size 1 given split is replicated in x and y (nothing to split), so every process "
    "computes the whole product; Paddle still marks the output and the bias pending sums over "
    "k's mesh dims, which sums the product once per process. Ours leaves nothing pending.",
    _merged_k,
)


register_deviation(
    "flpga-keeps-uneven-shard", {"fused_linear_param_grad_add"},
    "The weight gradient is laid out as matmul lays out x^T @ dout, with matmul's policy of "
    "keeping a letter its mesh dims do not divide evenly (matmul-keeps-uneven-shard); Paddle "
    "replicates it, so its gradient (and the accumulator it checks) differs.",
    _keeps_uneven,
)


def _given_dout(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    if case["direction"] != "forward" or agrees(case, got):
        return False
    return any(_paddle_variant(case, even=even, given_dout=True) for even in (False, True))


register_deviation(
    "flpga-bias-grad-of-given-dout", {"fused_linear_param_grad_add"},
    "Paddle lays the bias gradient out from the dout it is given, while the kernel sums the dout "
    "the product's layout reshards it to: where the two differ (rows sharded or a pending sum "
    "dropped) Paddle's bias gradient claims the wrong pending sums, and it accepts or refuses the "
    "dbias accumulator by that claim. Ours reads the resharded dout.",
    _given_dout,
)
