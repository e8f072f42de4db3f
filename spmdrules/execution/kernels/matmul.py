"""Local kernels of the matrix products: matmul/matmul_v2, bmm and its gradient, einsum and its
gradient.

Every rank multiplies its own blocks. The rules give a letter (batch, m, n, k, or an einsum letter)
the same mesh dims in every operand that has it and replicate size-1 (broadcast) dims, so the local
blocks line up and broadcast like the global operands. A rank holding a block of a contracted
letter computes the product over its part of that letter only: its output block is one piece of
the pending sum the rule marks on that letter's mesh dims.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine import einsum
from spmdrules.execution.local import Array, Block, LocalContext, array, arrays, register_kernel


def _swap_last2(a: Array, flag: bool) -> Array:
    """Paddle's trans_x / trans_y: swap the last two dims; a vector has nothing to transpose."""
    return np.swapaxes(a, -1, -2) if flag and a.ndim >= 2 else a


@register_kernel("matmul", "matmul_v2")
def matmul_kernel(ctx: LocalContext, blocks: Sequence[Block]) -> tuple[Block, ...]:
    """x @ y with numpy's (= Paddle's) rules for 1-D operands and broadcast batch dims."""
    x = _swap_last2(array(ctx, blocks, 0, "x"), bool(ctx.attrs.get("trans_x", False)))
    y = _swap_last2(array(ctx, blocks, 1, "y"), bool(ctx.attrs.get("trans_y", False)))
    return (np.asarray(np.matmul(x, y)),)


@register_kernel("bmm")
def bmm_kernel(ctx: LocalContext, blocks: Sequence[Block]) -> tuple[Block, ...]:
    x = array(ctx, blocks, 0, "x")
    y = array(ctx, blocks, 1, "y")
    if x.ndim != 3 or y.ndim != 3:
        raise RuleArgumentError(
            f"bmm: 'x' and 'y' must be 3-D [batch, rows, cols] blocks, got ranks {x.ndim} and "
            f"{y.ndim}"
        )
    return (np.asarray(np.matmul(x, y)),)


@register_kernel("bmm_grad")
def bmm_grad_kernel(ctx: LocalContext, blocks: Sequence[Block]) -> tuple[Block, ...]:
    """x_grad = out_grad @ y^T and y_grad = x^T @ out_grad, each over the local blocks."""
    x = array(ctx, blocks, 0, "x")
    y = array(ctx, blocks, 1, "y")
    g = array(ctx, blocks, 2, "out_grad")
    return (
        np.asarray(np.matmul(g, np.swapaxes(y, -1, -2))),
        np.asarray(np.matmul(np.swapaxes(x, -1, -2), g)),
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
def einsum_kernel(ctx: LocalContext, blocks: Sequence[Block]) -> tuple[Block, ...]:
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
def einsum_grad_kernel(ctx: LocalContext, blocks: Sequence[Block]) -> tuple[Block, ...]:
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


__all__ = ["bmm_kernel", "einsum_kernel", "matmul_kernel", "operand_grad"]
