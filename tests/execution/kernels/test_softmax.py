"""The local kernels of softmax and log_softmax (spmdrules/execution/kernels/softmax.py), proven by
execution with the harness in tests/support/kernel_harness.py."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import (
    Op,
    _ref_log_softmax,
    _x,
    check_serial,
    check_sharded,
    mesh_of,
)

from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import UnsupportedError
from spmdrules.core.shards import ShardMismatch


@pytest.mark.parametrize(("name", "shape", "axis"), [
    ("softmax", [4, 5, 6], -1), ("softmax", [4, 5, 6], 1), ("log_softmax", [3, 7], 0),
    ("log_softmax", [4, 5, 6], -1), ("softmax", [], -1), ("log_softmax", [], 0),
])
def test_softmax(name: str, shape: list[int], axis: int) -> None:
    x = _x(*shape)
    op = Op(name, [x], {"axis": axis})
    ls = _ref_log_softmax(x.reshape(1), 0).reshape(x.shape) if not shape else \
        _ref_log_softmax(x, axis)
    want = (ls if name == "log_softmax" else np.exp(ls),)
    check_serial(op, want, exact=False)
    assert check_sharded(op, want, exact=False, seed=9) > 0


def test_softmax_refuses_a_cut_row_and_a_partial_input() -> None:
    mesh = mesh_of((2,))
    op = Op("softmax", [_x(4, 6)], {"axis": -1})
    cut = DistAttr(mesh, [-1, 0])
    with pytest.raises(ShardMismatch, match="whole row"):
        op.run([cut], [cut], np.random.default_rng(0))
    part = DistAttr(mesh, [-1, -1], {0: "sum"})
    with pytest.raises(UnsupportedError, match="partial"):
        op.run([part], [DistAttr(mesh, [-1, -1])], np.random.default_rng(0))

