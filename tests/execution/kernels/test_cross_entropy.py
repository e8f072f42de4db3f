"""The local kernels of the cross entropies (also vocab-parallel, with an all-reduce)
(spmdrules/execution/kernels/cross_entropy.py), proven by execution with the harness in
tests/support/kernel_harness.py."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from kernel_harness import (
    MESHES,
    RNG,
    Array,
    Op,
    _random_like,
    _random_out,
    _ref_log_softmax,
    _shape_of,
    _x,
    assert_same,
    check_serial,
    mesh_of,
)

from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError, UnsupportedError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.shards import ShardMismatch, scatter, shard_index
from spmdrules.execution.kernels.cross_entropy import AllReduce, cross_entropy
from spmdrules.execution.local import LocalContext


def _ref_ce(x: Array, label: Array, soft: bool, use_softmax: bool, ignore: int, axis: int
            ) -> tuple[Array, Array]:
    logp = _ref_log_softmax(x, axis) if use_softmax else np.log(x)
    prob = np.exp(logp) if use_softmax else x
    if soft:
        return prob, -np.sum(label * logp, axis=axis, keepdims=True)
    safe = np.where(label == ignore, 0, label)
    loss = -np.take_along_axis(logp, safe, axis=axis)
    return prob, np.where(label == ignore, 0.0, loss)


CE_CASES = [
    # (x shape, axis, soft_label, use_softmax)
    ((4, 5, 7), -1, False, True),
    ((4, 6, 3), 1, False, True),
    ((4, 5), -1, True, True),
    ((3, 4, 5), -1, False, False),
    ((6, 4), 0, True, False),
]


def _ce_inputs(shape: tuple[int, ...], axis: int, soft: bool, use_softmax: bool
               ) -> tuple[Array, Array]:
    ax = axis % len(shape)
    x = _x(*shape)
    if not use_softmax:
        x = np.exp(x) / np.exp(x).sum(axis=ax, keepdims=True)  # probabilities
    if soft:
        lab = np.abs(_x(*shape))
        return x, lab / lab.sum(axis=ax, keepdims=True)
    lab_shape = (*shape[:ax], 1, *shape[ax + 1 :])
    lab = RNG.integers(0, shape[ax], size=lab_shape).astype(np.int64)
    lab.flat[::5] = -100  # ignored rows
    return x, lab


@pytest.mark.parametrize("name", ["cross_entropy_with_softmax", "softmax_with_cross_entropy"])
@pytest.mark.parametrize(("shape", "axis", "soft", "use_softmax"), CE_CASES)
def test_cross_entropy(name: str, shape: tuple[int, ...], axis: int, soft: bool,
                       use_softmax: bool) -> None:
    x, label = _ce_inputs(shape, axis, soft, use_softmax)
    op = Op(name, [x, label], {"soft_label": soft, "use_softmax": use_softmax, "axis": axis})
    want = _ref_ce(x, label, soft, use_softmax, -100, axis % len(shape))
    check_serial(op, want, exact=False)
    assert check_sharded_ce(op, want, seed=13) > 0


class ThreadedMesh:
    """Every mesh coordinate in a thread; ``allreduce`` combines the ranks that differ only on
    ``over`` (the class axis's mesh dims), as the executor's collective would."""

    def __init__(self, mesh: ProcessMesh, over: Sequence[int]) -> None:
        self.coords = [tuple(c) for c in np.ndindex(*mesh.shape)]
        self.over = set(over)
        self.barrier = threading.Barrier(len(self.coords), timeout=20)
        self.box: dict[tuple[int, tuple[int, ...]], Array] = {}

    def allreduce(self, coord: tuple[int, ...]) -> AllReduce:
        calls = [0]

        def reduce_(local: Array, how: str) -> Array:
            k = calls[0]
            calls[0] += 1
            self.box[k, coord] = local
            self.barrier.wait()
            peers = [self.box[k, c] for c in self.coords if all(
                c[d] == coord[d] for d in range(len(coord)) if d not in self.over)]
            out: Array = np.max(peers, axis=0) if how == "max" else np.sum(peers, axis=0)
            self.barrier.wait()
            return out

        return reduce_


def run_vocab_parallel(op: Op, in_attrs: Sequence[Any], out_attrs: Sequence[Any],
                       rng: np.random.Generator) -> list[Any]:
    mesh = in_attrs[0].mesh
    xs = [x for x in op.args if isinstance(x, np.ndarray)]
    axis = op.full_attrs["axis"] % xs[0].ndim
    tm = ThreadedMesh(mesh, in_attrs[0].multi_dims_mapping[axis])
    scattered = [scatter(x, a, rng) for x, a in zip(xs, in_attrs, strict=True)]
    blocks: dict[tuple[int, ...], Any] = {}
    errors: list[BaseException] = []

    def rank(c: tuple[int, ...]) -> None:
        ctx = LocalContext(op.name, mesh, c, tuple(_shape_of(x) for x in op.args),
                           tuple(in_attrs), op.out_shapes, tuple(out_attrs), op.full_attrs)
        try:
            blocks[c] = cross_entropy(ctx, [s[c] for s in scattered], tm.allreduce(c))
        except BaseException as e:  # reported by the main thread
            errors.append(e)
            tm.barrier.abort()

    threads = [threading.Thread(target=rank, args=(c,)) for c in tm.coords]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    if errors:
        raise errors[0]
    return op.gather(blocks, out_attrs)


def check_sharded_ce(op: Op, want: Sequence[Any], seed: int) -> int:
    """check_sharded, with the vocab-parallel cases run on threads with a real allreduce (the
    local kernel must refuse them)."""
    rng = np.random.default_rng(seed)
    ran = 0
    x = op.args[0]
    assert isinstance(x, np.ndarray)
    axis = op.full_attrs["axis"] % x.ndim
    for ms in MESHES:
        mesh = mesh_of(ms)
        for k in range(12):
            ins = [_random_like(a, mesh, rng, partial=k % 3 == 0) for a in op.args]
            outs = [_random_out(s, mesh, rng) for s in op.out_shapes] if k % 2 else None
            try:
                info = op.infer(ins, outs)
            except SpmdError:
                continue
            in_attrs, out_attrs = op.attributes(info)
            cut = shard_index(in_attrs[0], axis, (0,) * mesh.ndim)[1] > 1
            vocab_parallel = not op.full_attrs["soft_label"] and op.full_attrs["use_softmax"]
            if cut and not vocab_parallel:
                # Only the vocab-parallel kernel may cut the classes; the forward rule lets a
                # soft label's class shard through (reported), and the kernel refuses it.
                with pytest.raises(ShardMismatch, match="need every class"):
                    op.run(in_attrs, out_attrs, rng)
                continue
            if cut:
                with pytest.raises(UnsupportedError, match="the classes"):
                    op.run(in_attrs, out_attrs, rng)
                got = run_vocab_parallel(op, in_attrs, out_attrs, rng)
            else:
                got = op.run(in_attrs, out_attrs, rng)
            assert_same(got, want, exact=False)
            ran += 1
    return ran


def test_vocab_parallel_cross_entropy_runs_with_an_allreduce() -> None:
    x, label = _ce_inputs((4, 9), -1, False, True)
    op = Op("cross_entropy_with_softmax", [x, label])
    mesh = mesh_of((2, 2))
    info = op.infer([DistAttr(mesh, [0, 1]), DistAttr(mesh, [0, -1])], None)
    in_attrs, out_attrs = op.attributes(info)
    assert in_attrs[0].multi_dims_mapping == ((0,), (1,))  # the rule keeps the classes cut
    assert out_attrs[1].partial_items == ()  # and the loss complete
    got = run_vocab_parallel(op, in_attrs, out_attrs, np.random.default_rng(0))
    assert_same(got, _ref_ce(x, label, False, True, -100, 1), exact=False)


def test_vocab_parallel_cross_entropy_with_empty_class_blocks() -> None:
    """3 classes over 4 ranks: the rank without classes still joins every allreduce."""
    x, label = _ce_inputs((2, 3), -1, False, True)
    x -= 10.0  # a negative row max: an empty block must not pull the shift to 0
    op = Op("softmax_with_cross_entropy", [x, label])
    mesh = mesh_of((4,))
    info = op.infer([DistAttr(mesh, [-1, 0]), DistAttr(mesh, [-1, -1])], None)
    in_attrs, out_attrs = op.attributes(info)
    assert in_attrs[0].multi_dims_mapping == ((), (0,))
    got = run_vocab_parallel(op, in_attrs, out_attrs, np.random.default_rng(0))
    assert_same(got, _ref_ce(x, label, False, True, -100, 1), exact=False)

