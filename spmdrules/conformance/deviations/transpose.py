"""The deviations of the transpose rules from Paddle 3.3.1: classes and predicates."""

from __future__ import annotations

from typing import Any

from spmdrules.conformance.calls import agrees, build_call
from spmdrules.conformance.deviation import register_deviation, rule_module
from spmdrules.core.attr import DistAttr
from spmdrules.core.spec import SpmdInfo
from spmdrules.engine.registry import get_rule
from spmdrules.engine.rulekit import attr, shard_product

_rules = rule_module("transpose")


def _drop_nondivisible(a: DistAttr, shape: tuple[int, ...]) -> DistAttr:
    mesh_shape = a.mesh.shape
    m = tuple(
        () if dims and shape[i] % shard_product(mesh_shape, dims) else dims
        for i, dims in enumerate(a.multi_dims_mapping)
    )
    return attr(a, m, a.partial_items)


def _paddle_drops_derived_shard(case: dict[str, Any], got: SpmdInfo | BaseException) -> bool:
    """Paddle's answer is ours with the non-divisible dims of the derived tensor (out forward, x
    reverse) replicated, while the tensor it was derived from keeps them."""
    if not isinstance(got, SpmdInfo):
        return False
    _, direction, args, attrs = build_call(case)
    perm_attr = tuple(attrs["perm"])
    if direction == "forward":
        ours = get_rule(case["op"]).infer_forward(args[0], perm_attr)
    else:
        ours = get_rule(case["op"]).infer_reverse(args[0], args[1], perm_attr)
    if got != ours:
        return False
    x_in, out_in = got.inputs[0], got.outputs[0]
    if not isinstance(x_in, DistAttr) or not isinstance(out_in, DistAttr):
        return False
    x_shape = tuple(case["inputs"][0]["shape"])
    perm = _rules.normalise_perm(tuple(case["attrs"]["perm"]), len(x_shape))
    if case["direction"] == "forward":
        dropped = _drop_nondivisible(out_in, tuple(x_shape[d] for d in perm))
        paddle = SpmdInfo([x_in], [dropped])
        changed = dropped != out_in
    else:
        dropped = _drop_nondivisible(x_in, x_shape)
        paddle = SpmdInfo([dropped], [out_in])
        changed = dropped != x_in
    return changed and agrees(case, paddle)


register_deviation(
    "transpose-keeps-nondivisible-shard",
    set(_rules.TRANSPOSE_OPS),
    "Paddle replicates a dim whose size the mesh does not divide on the derived tensor only, "
    "leaving the other side sharded (an inconsistent pair); we keep the shard on both sides, "
    "which a local transpose computes exactly.",
    _paddle_drops_derived_shard,
)
