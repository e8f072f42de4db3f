"""The local kernels of matmul, matmul_v2 and bmm (spmdrules/execution/kernels/matmul.py), proven by
execution with the harness in tests/support/kernel_harness.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from kernel_harness import (
    Array,
    _normal,
    close,
    execute,
    layout,
    mesh,
    rep,
    serial,
)

import spmdrules as sr
from spmdrules.core.attr import DistAttr
from spmdrules.core.spec import TensorSpec


# ---- matrix products ------------------------------------------------------------------------------
def _mm_ref(x: Array, y: Array, tx: bool, ty: bool) -> Array:
    if tx and x.ndim > 1:
        x = np.swapaxes(x, -1, -2)
    if ty and y.ndim > 1:
        y = np.swapaxes(y, -1, -2)
    if x.ndim == 1 and y.ndim == 1:
        return np.asarray(sum(a * b for a, b in zip(x, y, strict=True)))
    xv = x[None, :] if x.ndim == 1 else x
    yv = y[:, None] if y.ndim == 1 else y
    out = np.einsum("...mk,...kn->...mn", xv, yv)
    if x.ndim == 1:
        out = out[..., 0, :]
    if y.ndim == 1:
        out = out[..., 0]
    return np.asarray(out)


MATMUL_CASES: list[
    tuple[tuple[int, ...], tuple[int, ...], bool, bool, list[Any], list[Any], tuple[int, ...]]
] = [
    # x shape, y shape, trans_x, trans_y, x mapping, y mapping, mesh
    ((4, 6), (6, 5), False, False, [0, 1], [1, -1], (2, 2)),  # k sharded: partial sum
    ((5, 6), (6, 3), False, False, [0, -1], [-1, 1], (2, 2)),  # uneven m
    ((6, 4), (5, 6), True, True, [1, 0], [-1, 1], (2, 2)),
    ((2, 3, 4, 6), (6, 5), False, False, [0, -1, -1, 1], [1, -1], (2, 2)),  # batch broadcast
    ((1, 4, 6), (3, 6, 5), False, False, [-1, -1, 0], [1, 0, -1], (3, 2)),  # size-1 batch
    ((6,), (2, 6, 4), False, False, [0], [1, 0, -1], (2, 2)),  # 1-D x
    ((3, 4, 8), (8,), False, False, [-1, 1, 0], [0], (2, 2)),  # 1-D y
    ((8,), (8,), False, False, [0], [0], (2,)),  # dot: a 0-d partial
    ((4, 8), (8, 6), False, False, [-1, [0, 1]], [[0, 1], -1], (2, 2)),  # co-sharded k
    ((4, 8, 6), (4, 6, 3), False, False, [0, 1, 2], [0, 2, -1], (2, 2, 2)),
]


@pytest.mark.parametrize("case", MATMUL_CASES, ids=[str(i) for i in range(len(MATMUL_CASES))])
def test_matmul(case: Any) -> None:
    xs, ys, tx, ty, xm, ym, ms = case
    x, y = _normal(*xs), _normal(*ys)
    attrs = {"trans_x": tx, "trans_y": ty}
    want = _mm_ref(x, y, tx, ty)
    for op in ("matmul", "matmul_v2"):
        close(serial(op, [x, y], attrs, [want.shape])[0], want)
    m = mesh(*ms)

    def attr(mp: list[Any]) -> DistAttr:
        return layout(m, mp)

    (got,) = execute("matmul", [x, y], [attr(xm), attr(ym)], attrs, [want.shape])
    close(got, want)


def test_k_sharded_product_is_a_partial() -> None:
    m = mesh(2)
    info = sr.get_rule("matmul").infer_forward(
        TensorSpec((4, 6), DistAttr(m, [-1, 0])),
        TensorSpec((6, 3), DistAttr(m, [0, -1])),
        False,
        False,
    )
    out = info.outputs[0]
    assert isinstance(out, DistAttr) and out.partial == {0: "sum"}


def test_bmm_and_its_gradient() -> None:
    x, y, g = _normal(4, 4, 6), _normal(4, 6, 5), _normal(4, 4, 5)
    want = np.einsum("bmk,bkn->bmn", x, y)
    close(serial("bmm", [x, y], {}, [want.shape])[0], want)
    m = mesh(2, 2)
    close(
        execute(
            "bmm", [x, y], [DistAttr(m, [0, -1, 1]), DistAttr(m, [0, 1, -1])], {}, [want.shape]
        )[0],
        want,
    )
    dx, dy = np.einsum("bmn,bkn->bmk", g, y), np.einsum("bmk,bmn->bkn", x, g)
    for layouts in (
        [rep(m, 3), rep(m, 3), rep(m, 3)],
        [DistAttr(m, [0, -1, 1]), DistAttr(m, [0, 1, -1]), DistAttr(m, [0, -1, -1])],
        # m sharded in x and out_grad: y_grad = x^T @ out_grad is a pending sum over mesh dim 1
        [DistAttr(m, [0, 1, -1]), DistAttr(m, [0, -1, -1]), DistAttr(m, [0, 1, -1])],
    ):
        gx, gy = execute("bmm_grad", [x, y, g], layouts, {}, [x.shape, y.shape])
        close(gx, dx)
        close(gy, dy)

