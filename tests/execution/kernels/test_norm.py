"""The local kernels of layer_norm and fused_rms_norm (spmdrules/execution/kernels/norm.py), proven
by execution with the harness in tests/support/kernel_harness.py."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import (
    Array,
    Op,
    _x,
    check_serial,
    check_sharded,
)


def _ref_layer_norm(x: Array, scale: Array | None, bias: Array | None, eps: float, bna: int
                    ) -> tuple[Array, Array, Array]:
    rows = x.reshape(*x.shape[:bna], -1)
    mean = rows.mean(axis=-1)
    var = ((rows - mean[..., None]) ** 2).mean(axis=-1)
    y = (rows - mean[..., None]) / np.sqrt(var[..., None] + eps)
    y = y * (1.0 if scale is None else scale) + (0.0 if bias is None else bias)
    return y.reshape(x.shape), mean, var


@pytest.mark.parametrize(("bna", "params"), [(1, True), (2, True), (1, False), (3, True)])
def test_layer_norm(bna: int, params: bool) -> None:
    x = _x(4, 3, 5, 2)
    size = int(np.prod(x.shape[bna:]))
    scale, bias = (_x(size), _x(size)) if params else (None, None)
    op = Op("layer_norm", [x, scale, bias], {"epsilon": 1e-5, "begin_norm_axis": bna})
    want = _ref_layer_norm(x, scale, bias, 1e-5, bna)
    check_serial(op, want, exact=False)
    assert check_sharded(op, want, exact=False, seed=10 + bna) > 0


def test_fused_rms_norm() -> None:
    x, scale = _x(4, 3, 6), _x(6)
    op = Op("fused_rms_norm", [x, scale], {"epsilon": 1e-6})
    inv = 1.0 / np.sqrt((x**2).mean(axis=-1) + 1e-6)
    want = (x * inv[..., None] * scale, inv)
    check_serial(op, want, exact=False)
    assert check_sharded(op, want, exact=False, seed=11) > 0

