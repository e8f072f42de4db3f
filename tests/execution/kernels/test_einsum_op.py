"""The local kernels of einsum (spmdrules/execution/kernels/einsum_op.py), proven by execution with
the harness in tests/support/kernel_harness.py."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import (
    Array,
    _normal,
    close,
    execute,
    mesh,
    serial,
)

from spmdrules.core.attr import DistAttr

EINSUM_CASES: list[tuple[str, list[tuple[int, ...]], list[list[int]], tuple[int, ...]]] = [
    ("ij,jk->ik", [(4, 6), (6, 5)], [[0, 1], [1, -1]], (2, 2)),
    ("bij,bjk->bik", [(4, 3, 6), (4, 6, 2)], [[0, -1, 1], [0, 1, -1]], (2, 2)),
    ("ij,kj->ik", [(5, 6), (3, 6)], [[-1, 0], [1, 0]], (2, 2)),
    ("i,j->ij", [(4,), (6,)], [[0], [1]], (2, 2)),
    ("ij->ji", [(4, 6)], [[0, 1]], (2, 2)),
    ("ijk->i", [(4, 6, 3)], [[0, 1, -1]], (2, 3)),
    ("ii->i", [(5, 5)], [[0, -1]], (2,)),
    ("ij,j->i", [(6, 8), (8,)], [[-1, 0], [0]], (4,)),
    ("ab,bc->", [(4, 6), (6, 2)], [[0, 1], [1, -1]], (2, 2)),
]


def _einsum_grads(eq: str, ops: list[Array], g: Array) -> list[Array]:
    """d sum(g * einsum(ops)) / d ops[i], entry by entry: einsum is linear in each operand."""
    grads = []
    for i, a in enumerate(ops):
        grad = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            unit = np.zeros_like(a)
            unit[idx] = 1.0
            grad[idx] = np.sum(
                g * np.einsum(eq, *[unit if j == i else o for j, o in enumerate(ops)])
            )
        grads.append(grad)
    return grads


@pytest.mark.parametrize(
    ("eq", "shapes", "maps", "ms"), EINSUM_CASES, ids=[c[0] for c in EINSUM_CASES]
)
def test_einsum_and_its_gradient(
    eq: str, shapes: list[tuple[int, ...]], maps: list[list[int]], ms: tuple[int, ...]
) -> None:
    ops = [_normal(*s) for s in shapes]
    want = np.einsum(eq, *ops)
    close(serial("einsum", [ops], {"equation": eq}, [want.shape])[0], want)
    m = mesh(*ms)
    attrs = [DistAttr(m, mp) for mp in maps]
    close(execute("einsum", [ops], [attrs], {"equation": eq}, [want.shape])[0], want)
    g = _normal(*want.shape)
    grads = _einsum_grads(eq, ops, g)
    shapes_out = [tuple(o.shape for o in ops)]
    (got,) = serial("einsum_grad", [ops, [], g], {"equation": eq}, shapes_out)
    for a, b in zip(got, grads, strict=True):
        close(a, b)
    (got,) = execute(
        "einsum_grad",
        [ops, [], g],
        [attrs, [], DistAttr(m, [-1] * g.ndim)],
        {"equation": eq},
        shapes_out,
    )
    for a, b in zip(got, grads, strict=True):
        close(a, b)

