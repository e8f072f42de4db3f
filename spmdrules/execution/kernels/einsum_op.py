"""Local kernels of einsum and einsum_grad: numpy's einsum on the blocks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine import einsum
from spmdrules.execution.local import (
    Array,
    LocalContext,
    LocalValue,
    array,
    arrays,
    register_kernel,
)


def _notation(ctx: LocalContext, n: int) -> einsum.Notation:
    equation = ctx.attrs.get("equation", "")
    nota = einsum.parse(equation)
    if len(nota.inputs) != n or len(nota.outputs) != 1:
        raise RuleArgumentError(
            f"{ctx.op}: equation {equation!r} names {len(nota.inputs)} operands and "
            f"{len(nota.outputs)} outputs, but {n} operand blocks were given; one output is needed"
        )
    return nota


@register_kernel("einsum")
def einsum_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    ops = arrays(ctx, blocks, 0, "inputs")
    nota = _notation(ctx, len(ops))
    spec = ",".join(nota.inputs) + "->" + nota.outputs[0]
    return (np.asarray(np.einsum(spec, *ops)),)


def operand_grad(letters: str, out: str, g: Array, others: Sequence[tuple[str, Array]],
                 like: Array) -> Array:
    """d(sum of g * einsum) / d operand with ``letters``, shaped like ``like``.

    The contraction of g with the other operands gives the gradient on the letters they share with
    the operand; a letter only this operand has was summed away, so its gradient is broadcast; a
    repeated letter (a diagonal) receives the gradient on the diagonal only.
    """
    uniq = "".join(dict.fromkeys(letters))
    present = set(out).union(*(set(ls) for ls, _ in others))
    kept = "".join(ch for ch in uniq if ch in present)
    spec = ",".join([out, *(ls for ls, _ in others)]) + "->" + kept
    core = np.asarray(np.einsum(spec, g, *(a for _, a in others)))
    sizes = dict(zip(letters, like.shape, strict=True))
    full = np.broadcast_to(
        core.reshape([sizes[ch] if ch in present else 1 for ch in uniq]), [sizes[ch] for ch in uniq]
    )
    if uniq == letters:
        return np.array(full)
    grad = np.zeros(like.shape, dtype=core.dtype)
    np.einsum(f"{letters}->{uniq}", grad)[...] = full  # a writeable view of the diagonal
    return grad


@register_kernel("einsum_grad")
def einsum_grad_kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    """The gradient of every operand (``inner_cache`` is not needed in numpy)."""
    ops = arrays(ctx, blocks, 0, "inputs")
    g = array(ctx, blocks, 2, "out_grad")
    nota = _notation(ctx, len(ops))
    out = nota.outputs[0]
    grads = [
        operand_grad(
            ls, out, g, [(o_ls, o) for j, (o_ls, o) in enumerate(zip(nota.inputs, ops, strict=True))
                         if j != i], x,
        )
        for i, (ls, x) in enumerate(zip(nota.inputs, ops, strict=True))
    ]
    return (grads,)
