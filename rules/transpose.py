"""transpose / transpose2: output dim i is input dim perm[i], with its sharding.

Moving whole dims never needs communication, whatever the sizes: the local block of every device
is transposed in place. So the sharding travels with the dim on both sides (Paddle 3.3.1 instead
replicates a non-divisible dim on the output only; see docs/deviations/shape.md).
"""

from __future__ import annotations

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.described import ranks, register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.policy import EVERY_REDUCTION, Policy
from spmdrules.engine.registry import A, T

TRANSPOSE_OPS = ("transpose", "transpose2")
#: a permutation of dims passes every pending result, whatever its reduce type
PERMUTATION = Policy(linear_types=EVERY_REDUCTION)


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


def transpose(x: tuple[int, ...], perm: tuple[int, ...] | None) -> Description:
    """``abc->cab``: out dim i is x dim perm[i], with its shards and x's pending results."""
    p = normalise_perm(perm, len(x))
    ls = letters(len(x))
    return Description((ls,), ("".join(ls[d] for d in p),), linear=(0,), policy=PERMUTATION)


def _check_out(x: tuple[int, ...], out: tuple[int, ...], perm: tuple[int, ...] | None) -> None:
    p = normalise_perm(perm, len(x))
    if out != tuple(x[d] for d in p):
        raise RuleArgumentError(
            f"'out' has shape {list(out)} but transposing 'x' of shape {list(x)} by "
            f"perm {list(p)} gives {[x[d] for d in p]}; pass the op's real output"
        )


for _name in TRANSPOSE_OPS:
    register_described(
        _name, transpose, inputs=[T("x")], outputs=[T("out")], attrs=[A("perm", "ints", None)],
        key=ranks, check_reverse=_check_out,
        doc="TransposeInferSpmd: out dim i carries x dim perm[i] and its sharding.",
    )
