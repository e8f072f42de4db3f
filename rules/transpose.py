"""transpose / transpose2: output dim i is input dim perm[i], with its sharding.

Moving whole dims never needs communication, whatever the sizes: the local block of every device
is transposed in place. So the sharding travels with the dim on both sides (Paddle 3.3.1 instead
replicates a non-divisible dim on the output only; see docs/deviations/shape.md).
"""

from __future__ import annotations

from typing import Any

from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.deviations import register_deviation
from spmdrules.engine.registry import A, T, register_rule
from spmdrules.engine.rulekit import attr, shard_product

TRANSPOSE_OPS = ("transpose", "transpose2")


def normalise_perm(perm: tuple[int, ...] | None, ndim: int) -> tuple[int, ...]:
    """``perm`` with negative entries counted from the end; it must be a permutation of the dims."""
    if perm is None:
        raise RuleArgumentError("attribute 'perm' is required")
    if len(perm) != ndim:
        raise RuleArgumentError(
            f"perm {list(perm)} has {len(perm)} entries but 'x' has rank {ndim}; give one "
            "entry per dim"
        )
    out = tuple(p + ndim if p < 0 else p for p in perm)
    if sorted(out) != list(range(ndim)):
        raise RuleArgumentError(
            f"perm {list(perm)} is not a permutation of the dims of 'x' (0..{ndim - 1}, or "
            f"{-ndim}..-1 from the end); name each dim exactly once"
        )
    return out


def transpose_forward(x: TensorSpec, perm: tuple[int, ...] | None) -> SpmdInfo:
    p = normalise_perm(perm, len(x.shape))
    a = x.attr
    m = a.multi_dims_mapping
    return SpmdInfo([a], [attr(x, tuple(m[d] for d in p), a.partial_items)])


def transpose_reverse(x: TensorSpec, out: TensorSpec, perm: tuple[int, ...] | None) -> SpmdInfo:
    p = normalise_perm(perm, len(x.shape))
    if out.shape != tuple(x.shape[d] for d in p):
        raise RuleArgumentError(
            f"'out' has shape {list(out.shape)} but transposing 'x' of shape {list(x.shape)} by "
            f"perm {list(p)} gives {[x.shape[d] for d in p]}; pass the op's real output"
        )
    om = out.attr.multi_dims_mapping
    xm: list[tuple[int, ...]] = [()] * len(p)
    for i, d in enumerate(p):
        xm[d] = om[i]
    return SpmdInfo([attr(x, tuple(xm))], [attr(out, om)])


for _name in TRANSPOSE_OPS:
    register_rule(
        _name,
        forward=transpose_forward,
        reverse=transpose_reverse,
        inputs=[T("x")],
        outputs=[T("out")],
        attrs=[A("perm", "ints", None)],
        family="shape",
        doc="TransposeInferSpmd: out dim i carries x dim perm[i] and its sharding.",
    )


# ---- deviation: Paddle replicates a non-divisible dim on the derived side only ------------------
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
    from spmdrules.conformance.runner import agrees, build_call

    if not isinstance(got, SpmdInfo):
        return False
    _, direction, args, attrs = build_call(case)
    perm_attr = tuple(attrs["perm"])
    if direction == "forward":
        ours = transpose_forward(args[0], perm_attr)
    else:
        ours = transpose_reverse(args[0], args[1], perm_attr)
    if got != ours:
        return False
    x_in, out_in = got.inputs[0], got.outputs[0]
    if not isinstance(x_in, DistAttr) or not isinstance(out_in, DistAttr):
        return False
    x_shape = tuple(case["inputs"][0]["shape"])
    perm = normalise_perm(tuple(case["attrs"]["perm"]), len(x_shape))
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
    set(TRANSPOSE_OPS),
    "Paddle replicates a dim whose size the mesh does not divide on the derived tensor only, "
    "leaving the other side sharded (an inconsistent pair); we keep the shard on both sides, "
    "which a local transpose computes exactly.",
    _paddle_drops_derived_shard,
)
