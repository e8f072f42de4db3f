"""transpose / transpose2: output dim i is input dim perm[i], with its sharding.

Moving whole dims never needs communication, whatever the sizes: the local block of every device
is transposed in place. So the sharding travels with the dim on both sides (Paddle 3.3.1 instead
replicates a non-divisible dim on the output only; see docs/deviations/shape.md).
"""

from __future__ import annotations

from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine.registry import A, T, register_rule
from spmdrules.engine.rulekit import attr

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
        doc="TransposeInferSpmd: out dim i carries x dim perm[i] and its sharding.",
    )
