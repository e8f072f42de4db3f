"""The local kernels of concat, stack, add_n, split and unbind
(spmdrules/execution/kernels/concat_split.py), proven by execution with the harness in
tests/support/kernel_harness.py."""

from __future__ import annotations

import numpy as np
import pytest
from kernel_harness import (
    Op,
    _x,
    assert_same,
    check_serial,
    check_sharded,
    mesh_of,
)

from spmdrules.core.attr import DistAttr
from spmdrules.core.shards import ShardMismatch
from spmdrules.execution.local import LocalContext, get_kernel


# ---- join / split --------------------------------------------------------------------------------------
def test_concat() -> None:
    xs = [_x(2, 3), _x(4, 3), _x(1, 3)]
    op = Op("concat", [xs], {"axis": 0})
    want = (np.concatenate(xs, axis=0),)
    check_serial(op, want, exact=True)
    assert check_sharded(op, want, exact=True, seed=1) > 0
    ys = [_x(3, 2), _x(3, 5)]
    op = Op("concat", [ys], {"axis": -1})
    assert check_sharded(op, (np.concatenate(ys, axis=1),), exact=True, seed=2) > 0


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_stack(axis: int) -> None:
    xs = [_x(3, 4), _x(3, 4), _x(3, 4)]
    op = Op("stack", [xs], {"axis": axis})
    want = (np.stack(xs, axis=axis),)
    check_serial(op, want, exact=True)
    assert check_sharded(op, want, exact=True, seed=3 + axis) > 0


def test_add_n() -> None:
    xs = [_x(4, 6), _x(4, 6), _x(4, 6)]
    op = Op("add_n", [xs])
    want = (xs[0] + xs[1] + xs[2],)
    check_serial(op, want, exact=True)
    assert check_sharded(op, want, exact=False, seed=4) > 0


@pytest.mark.parametrize(
    ("shape", "sections", "axis"), [([7, 4], [2, -1, 3], 0), ([4, 9], [3, 3, 3], 1),
                                    ([5, 6], [0, 6], -1)]
)
def test_split(shape: list[int], sections: list[int], axis: int) -> None:
    x = _x(*shape)
    op = Op("split", [x], {"sections": sections, "axis": axis})
    sizes = [s for s in sections if s != -1]
    if -1 in sections:
        sizes.insert(sections.index(-1), shape[axis] - sum(sizes))
    want = (np.split(x, np.cumsum(sizes)[:-1], axis=axis),)
    check_serial(op, want, exact=True)
    assert check_sharded(op, want, exact=True, seed=5) > 0


def test_split_sections_become_local_sections() -> None:
    """With the split axis sharded, each rank returns the part of every piece inside its rows."""
    mesh = mesh_of((2,))
    x = _x(7, 2)
    op = Op("split", [x], {"sections": [2, 3, 2], "axis": 0})
    ctx = LocalContext("split", mesh, (1,), (x.shape,), (DistAttr(mesh, [0, -1]),),
                       op.out_shapes, ((DistAttr(mesh, [-1, -1]),) * 3,), op.full_attrs)
    (pieces,) = get_kernel("split")(ctx, [x[4:]])  # rank 1 holds rows 4..6
    assert isinstance(pieces, list)
    assert [p.shape[0] for p in pieces] == [0, 1, 2]
    assert_same(pieces, [x[4:4], x[4:5], x[5:7]], exact=True)


def test_split_with_num_and_unbind() -> None:
    x = _x(4, 6)
    op = Op("split_with_num", [x], {"num": 3, "axis": 1})
    want = (np.split(x, 3, axis=1),)
    check_serial(op, want, exact=True)
    assert check_sharded(op, want, exact=True, seed=6) > 0
    y = _x(2, 3, 4)
    for axis in (0, -1):
        op = Op("unbind", [y], {"axis": axis})
        want = ([np.take(y, i, axis=axis) for i in range(y.shape[axis])],)
        check_serial(op, want, exact=True)
        assert check_sharded(op, want, exact=True, seed=7) > 0


def test_unbind_refuses_a_sharded_axis() -> None:
    mesh = mesh_of((2,))
    op = Op("unbind", [_x(4, 3)], {"axis": 0})
    with pytest.raises(ShardMismatch, match="replicate x dim 0"):
        op.run([DistAttr(mesh, [0, -1])], [(DistAttr(mesh, [-1]),) * 4],
               np.random.default_rng(0))

