"""The local kernels of the reshape ops (reshape, flatten, squeeze, unsqueeze; test_shape_ops also
runs transpose's cases) (spmdrules/execution/kernels/reshape.py), proven by execution with the
harness in tests/support/kernel_harness.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from kernel_harness import (
    Array,
    Op,
    _x,
    assert_same,
    check_serial,
    check_sharded,
    mesh_of,
)

from spmdrules.core.attr import DistAttr
from spmdrules.core.shards import ShardMismatch

# ---- shape ops ---------------------------------------------------------------------------------------
SHAPE_CASES: list[tuple[str, list[int], dict[str, Any]]] = [
    ("reshape", [4, 6], {"shape": [24]}),
    ("reshape", [4, 6], {"shape": [2, 2, 6]}),
    ("reshape2", [2, 3, 4], {"shape": [6, -1]}),
    ("reshape", [6, 4], {"shape": [0, 2, 2]}),
    ("reshape", [8, 3], {"shape": [4, 6]}),
    ("reshape", [5, 3], {"shape": [3, 5]}),
    ("reshape", [], {"shape": [1, 1]}),
    ("flatten", [2, 3, 4], {"start_axis": 1, "stop_axis": -1}),
    ("flatten", [4, 3, 2, 2], {"start_axis": 0, "stop_axis": 1}),
    ("flatten", [], {}),
    ("squeeze", [1, 4, 1, 3], {"axis": []}),
    ("squeeze", [1, 4, 1, 3], {"axis": [2, -4]}),
    ("squeeze", [5, 1, 3], {"axis": [0, 1]}),
    ("unsqueeze", [4, 3], {"axis": [0]}),
    ("unsqueeze", [4, 3], {"axis": [2, 1]}),
    ("unsqueeze2", [5, 3], {"axis": [-1, 0, 1]}),
    ("transpose", [2, 3, 4], {"perm": [2, 0, 1]}),
    ("transpose2", [5, 3, 4], {"perm": [1, -1, 0]}),
]


def _shape_reference(name: str, x: Array, attrs: dict[str, Any], out_shape: Any) -> tuple[Any, ...]:
    if name.startswith("transpose"):
        return (np.transpose(x, [p % x.ndim for p in attrs["perm"]]),)
    if name.startswith("unsqueeze"):
        y = x
        for a in attrs["axis"]:  # sequential insertion, as paddle.unsqueeze
            y = np.expand_dims(y, a if a >= 0 else a + y.ndim + 1)
        return (y,)
    return (x.reshape(out_shape),)


@pytest.mark.parametrize(("name", "shape", "attrs"), SHAPE_CASES, ids=lambda v: str(v))
def test_shape_ops(name: str, shape: list[int], attrs: dict[str, Any]) -> None:
    x = _x(*shape)
    op = Op(name, [x], attrs)
    want = _shape_reference(name, x, attrs, op.out_shapes[0])
    assert want[0].shape == op.out_shapes[0]
    check_serial(op, want, exact=True)
    assert check_sharded(op, want, exact=True, seed=len(shape) + len(name)) > 0


def test_reshape_refuses_blocks_cut_differently() -> None:
    """An x and out attribute that cut the data differently is a ShardMismatch, not garbage."""
    mesh = mesh_of((2,))
    op = Op("reshape", [_x(3, 4)], {"shape": [12]})
    x_attr = DistAttr(mesh, [0, -1])  # rows 0..1 and 2: 8 and 4 elements
    with pytest.raises(ShardMismatch, match="same pieces"):
        op.run([x_attr], [DistAttr(mesh, [0])], np.random.default_rng(0))  # 6 and 6


def test_squeeze_reads_size_one_off_the_global_shape() -> None:
    """A dim of global size 3 cut 4 ways has blocks of size 1 (and 0): they stay dims."""
    mesh = mesh_of((4,))
    x = _x(3, 1, 2)
    op = Op("squeeze", [x], {"axis": []})
    got = op.run([DistAttr(mesh, [0, -1, -1])], [DistAttr(mesh, [0, -1])], np.random.default_rng(0))
    assert_same(got, [x.reshape(3, 2)], exact=True)

