"""Spatial splits through window ops of odd extents (issue 24): a conv/pool chain, batch on dp
and H on mp of a 2x2 mesh, whose H goes 14 -> 7 (blocks of 4 and 3) -> 4 -> 2 -> 1. The split
stays through the uneven blocks, each block borrowing the halo its windows read from the real
extents, and ends only where H collapses below mp (2 -> 1), where the batch split stays. Run on
the simulated mesh and under mpiexec (4 ranks), forward and reverse, equal to serial numpy, with
the bytes the executors send equal to the plans' and the halos' boxes."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from sharded_runs import (
    assert_mpi_equals_serial_forward_and_reverse,
    assert_simulated_equals_serial,
    halo_predictions,
)

import spmdrules as sr
from spmdrules import ops
from spmdrules.completion import Completion, complete
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.executor import random_feeds
from spmdrules.execution.lowering import lower
from spmdrules.execution.program import HaloStep, Program
from spmdrules.execution.simulated import run_simulated
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
OUT = "head"
BATCH_H = (0, -1, 1, -1)  # the batch on dp, H on mp
BATCH = (0, -1, -1, -1)


def chain() -> Graph:
    """x [4, 3, 14, 6] -> conv 3x3 -> max pool 3x3/2 (H 7: 4 + 3) -> conv 3x3 (halos over the
    uneven blocks) -> conv 3x3/2 (H 4) -> avg pool 2x2/2 (H 2) -> conv 3x3/2 (H 1: the split
    ends) -> relu -> global avg pool -> flatten -> matmul."""
    with Graph("uneven_windows") as g:
        h = g.input("x", [4, 3, 14, 6], "float64")
        shard(h, MESH, ("dp", None, "mp", None))
        c = 3
        for name, cout, stride in (("conv0", 4, 1), ("pool0", 0, 2), ("conv1", 4, 1),
                                   ("conv2", 5, 2), ("pool1", 0, 2), ("conv3", 6, 2)):
            if cout:
                w = g.param(f"{name}.weight", [cout, c, 3, 3], "float64")
                h = ops.conv2d(h, w, strides=[stride, stride], paddings=[1, 1],
                               spatial_sharding=True, name=name)
                c = cout
            elif name == "pool0":
                h = ops.pool2d(h, kernel_size=[3, 3], strides=[2, 2], paddings=[1, 1], name=name)
            else:
                h = ops.pool2d(h, kernel_size=[2, 2], strides=[2, 2], pooling_type="avg",
                               name=name)
        h = ops.relu(h, name="relu")
        h = ops.pool2d(h, kernel_size=[1, 1], global_pooling=True, pooling_type="avg",
                       name="gap")
        h = ops.flatten(h, start_axis=1, stop_axis=-1, name="flat")
        ops.matmul(h, g.param("head.weight", [c, 2], "float64"), name=OUT)
    return g


def completed() -> tuple[Completion, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = complete(chain())
    return r, [w for w in caught if issubclass(w.category, sr.DroppedSplitWarning)]


def test_the_split_stays_through_odd_extents_and_ends_where_h_collapses() -> None:
    r, caught = completed()
    g = r.graph
    assert [g.tensor(t).shape[2] for t in ("conv0", "pool0", "conv1", "conv2", "pool1",
                                           "conv3")] == [14, 7, 7, 4, 2, 1]
    for t in ("conv0", "pool0", "conv1", "conv2", "pool1"):
        assert r.attr(t).dims_mapping == BATCH_H, t
    # H 2 -> 1 on mp = 2: only mp goes, at conv3, which reads H whole; the batch split stays
    for t in ("conv3", "relu", "gap"):
        assert r.attr(t).dims_mapping == BATCH, t
    [d] = r.dropped
    assert (d.tensor, d.op, d.side, d.mesh_dims, d.dim) == ("pool1", "conv3", "operand",
                                                             ("mp",), 2)
    assert d.reason.startswith("extent: its result 'conv3' [4, 6, 1, 1] has dim 2 of length 1")
    assert [str(w.message) for w in caught] == [str(d)]
    # one gather, of the collapsing conv's input over mp; nothing else moves but the halos
    [e] = r.reshards
    assert (e.tensor, e.src.dims_mapping, e.dst.dims_mapping) == ("pool1", BATCH_H, BATCH)
    assert [s.kind for s in e.plan().steps] == ["all_gather"]


def test_the_halos_are_the_real_extents_boxes() -> None:
    prog = lower(completed()[0])
    halos = {i.op: i for i in prog.instructions if isinstance(i, HaloStep)}
    # conv0, pool0, conv1 (over blocks of 4 and 3 rows), conv2 (its stride-2 windows read one
    # row past the first block only); pool1's 2x2/2 windows stay in their blocks; conv3 reads
    # H whole
    assert sorted(halos) == ["conv0", "conv1", "conv2", "pool0"]
    row = 4 // 2 * 4 * 3 * 8  # a row of conv1's dp shard: batch 2, 4 channels, W 3, float64
    # conv1 on H 7 (blocks of rows 0..3 and 4..6): output rows 0..3 read input rows -1..4, so
    # the first block borrows row 4; rows 4..6 read 3..7, so the second borrows row 3
    assert halos["conv1"].predicted_bytes == 2 * row * 2  # two rows in each of the 2 dp groups
    # conv2 (3x3/2) makes 4 rows (0..1 and 2..3): rows 0..1 read input -1..3, all held by the
    # first block (0..3); rows 2..3 read 3..6, so only the second block borrows a row
    assert halos["conv2"].predicted_bytes == row * 2


def _setup() -> tuple[Graph, Program, Program, dict[str, Any], dict[str, Any]]:
    r, _ = completed()
    prog = lower(r)
    gp = gradient_program(prog, [OUT])
    feeds = random_feeds(prog, seed=1)
    seeds = {OUT: np.random.default_rng(2).standard_normal(prog.buffers[OUT].shape)}
    feeds[gp.seeds[OUT]] = seeds[OUT]
    return r.graph, prog, gp, feeds, seeds


def test_simulated_equals_serial_forward_and_reverse() -> None:
    r, _ = completed()
    prog = lower(r)
    feeds = random_feeds(prog, seed=1)
    assert_simulated_equals_serial(r.graph, feeds, prog=prog, loss=OUT)
    assert run_simulated(prog, feeds).traffic.halo == halo_predictions(prog)


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_mpi_equals_serial_forward_and_reverse() -> None:
    assert_mpi_equals_serial_forward_and_reverse(*_setup())
