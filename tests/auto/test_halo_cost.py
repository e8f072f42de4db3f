"""The cost model prices a spatial split's halo exchange (issue 27): from the description the
lowering builds its HaloExchange from, so the bytes it predicts are the bytes the runtime
counts, and a spatial plan costs more than a batch plan of the same compute. Its memos are
bounded, so a process that plans many models does not grow them without end."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sharded_runs import run_mpi

import spmdrules as sr
from spmdrules.auto import candidates, pricing, solver
from spmdrules.auto import cost as cm
from spmdrules.completion import complete
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.executor import random_feeds
from spmdrules.execution.lowering import lower
from spmdrules.execution.simulated import run_simulated
from spmdrules.graph import ops
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([0, 1, 2, 3], dim_names=["p"])


def _cnn(split: tuple[str | None, ...], dtype: str = "float32") -> Graph:
    """conv 3x3 (padded) -> relu -> max pool 3x3 stride 2 (padded) -> conv 5x3 dilated, with the
    input laid out as ``split``: both convs and the pool read across a spatial split."""
    with Graph("halo_cnn") as g:
        x = g.input("x", [4, 3, 16, 12], dtype)
        f1 = g.param("f1", [8, 3, 3, 3], dtype)
        f2 = g.param("f2", [4, 8, 5, 3], dtype)
        y = ops.conv2d(x, f1, paddings=[1, 1], spatial_sharding=True, name="conv1")
        r = ops.relu(y, name="relu")
        z = ops.pool2d(r, kernel_size=[3, 3], strides=[2, 2], paddings=[1, 1],
                       pooling_type="max", name="pool")
        ops.conv2d(z, f2, paddings=[2, 1], dilations=[1, 1], spatial_sharding=True,
                   name="conv2")
    shard(x, MESH, split)
    return g


def test_a_spatial_plan_costs_its_halos_above_a_batch_plan_of_equal_compute() -> None:
    opts = cm.Options()
    spatial = complete(_cnn((None, None, "p", None)))
    batch = complete(_cnn(("p", None, None, None)))
    s, b = cm.estimate(spatial, opts), cm.estimate(batch, opts)
    assert s.compute == pytest.approx(b.compute)
    moved = cm.halo_bytes(spatial)
    assert set(moved) == {"conv1", "pool", "conv2"}, moved
    assert cm.halo_bytes(batch) == {}
    halos = sum(cm.halo_time(op, *layouts, opts) for op, *layouts in cm._op_layouts(spatial))
    assert halos > 0
    assert s.time > b.time
    # an op's halo is priced as the planner prices a box exchange: one round, the busiest
    # process's bytes, the reverse pass returning them
    op, ins, outs = next(t for t in cm._op_layouts(spatial) if t[0].name == "conv1")
    ex = cm.halo_exchange(op, ins, outs)
    assert ex is not None and ex.mesh_dims == (0,)
    once = opts.cost.step_time(MESH, 0, 1, ex.most * 4)
    assert cm.halo_time(op, ins, outs, opts) == pytest.approx(2 * once)
    inference = cm.Options(training=False)
    assert cm.halo_time(op, ins, outs, inference) == pytest.approx(once)


@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_the_predicted_halo_bytes_of_a_spatial_conv_and_pool_are_what_mpi_counts() -> None:
    g = _cnn((None, None, "p", None), dtype="float64")
    result = complete(g)
    predicted = cm.halo_bytes(result)
    prog = lower(result)
    out = prog.tensors[-1]
    gp = gradient_program(prog, [out])
    feeds: dict[str, Any] = random_feeds(prog, seed=5)
    feeds[gp.seeds[out]] = np.random.default_rng(6).standard_normal(prog.buffers[out].shape)
    run = run_mpi(gp, feeds, nprocs=4, timeout=100)
    counted = run.traffic.halo
    forward = {k: v for k, v in counted.items() if not k.startswith("grad[")}
    reverse = {k: v for k, v in counted.items() if k.startswith("grad[")}
    by_op = {k.rsplit(" -> ", 1)[1]: v for k, v in forward.items()}
    assert by_op == predicted
    # the reverse pass returns each halo's cotangent, the same pieces (what halo_time prices)
    back = {k.rsplit(" -> ", 1)[1].rstrip("]"): v for k, v in reverse.items()}
    assert back == predicted


def test_the_cost_memos_stay_within_their_bounds_across_many_graphs() -> None:
    opts = cm.Options()
    mesh = sr.ProcessMesh([0, 1], dim_names=["p"])
    kinds = pricing.MAX_KINDS + 20
    for width in range(1, kinds + 1):
        with Graph(f"g{width}") as g:
            x = g.input("x", [2, width], "float32")
            ops.relu(x, name="r")
        (op,) = g.ops
        cm.work(op)
        split = sr.DistAttr(mesh, [0, -1])
        assert pricing.prices(opts.cost).time(
            split, sr.DistAttr.replicated(mesh, 2), (2, width), "float32") > 0
    # every kind was priced, and the memo kept only the most recent MAX_KINDS of them
    states = pricing.prices(opts.cost).states.cache_info()  # type: ignore[attr-defined]
    assert (states.maxsize, states.currsize) == (pricing.MAX_KINDS, pricing.MAX_KINDS)
    work = cm._work.cache_info()
    assert work.maxsize == candidates.MEMO_SIZE and work.currsize <= candidates.MEMO_SIZE
    assert pricing.prices.cache_info().maxsize == pricing.MAX_COST_MODELS
    assert solver._edge_prices.cache_info().maxsize == candidates.MEMO_SIZE


@pytest.mark.parametrize(("mesh", "spec"), [
    (sr.ProcessMesh([0, 1, 2], dim_names=["p"]), (None, None, "p", None)),
    (sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["p", "q"]), (None, None, "p", "q")),
], ids=["uneven-1d", "h-and-w-2d"])
def test_the_predicted_halo_bytes_of_uneven_and_2d_spatial_splits_are_what_runs(
        mesh: sr.ProcessMesh, spec: tuple[str | None, ...]) -> None:
    """16 rows over 3 processes (uneven blocks), and H and W split over a 2x2 mesh (corner
    pieces too): the prediction is what the simulated mesh moves, forward and reverse."""
    with Graph("halo_uneven") as g:
        x = g.input("x", [2, 3, 16, 12], "float64")
        f = g.param("f", [4, 3, 3, 3], "float64")
        y = ops.conv2d(x, f, paddings=[1, 1], spatial_sharding=True, name="conv")
        ops.pool2d(y, kernel_size=[3, 3], strides=[1, 1], paddings=[1, 1], pooling_type="avg",
                   name="pool")
    for t in g.tensors:
        if len(t.shape) == 4 and t.role != "param":
            shard(t, mesh, spec)
    result = complete(g)
    predicted = cm.halo_bytes(result)
    assert set(predicted) == {"conv", "pool"}
    prog = lower(result)
    out = prog.tensors[-1]
    gp = gradient_program(prog, [out])
    feeds: dict[str, Any] = random_feeds(prog, seed=5)
    feeds[gp.seeds[out]] = np.random.default_rng(6).standard_normal(prog.buffers[out].shape)
    moved = run_simulated(gp, feeds).traffic.halo
    assert {k.rsplit(" -> ", 1)[1]: v for k, v in moved.items()
            if not k.startswith("grad[")} == predicted
    assert {k.rsplit(" -> ", 1)[1].rstrip("]"): v for k, v in moved.items()
            if k.startswith("grad[")} == predicted


def test_the_candidates_memo_keeps_the_newest_signatures_within_its_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(candidates, "_STRATEGIES", {})
    monkeypatch.setattr(candidates, "MEMO_SIZE", 8)
    mesh = sr.ProcessMesh([0, 1], dim_names=["p"])
    for width in range(2, 22, 2):
        with Graph(f"c{width}") as g:
            ops.relu(g.input("x", [2, width], "float32"), name="r")
        (op,) = g.ops
        assert candidates.strategies(op, mesh)  # replicated at least
    assert len(candidates._STRATEGIES) == 8
    assert candidates.strategies(op, mesh) is candidates._STRATEGIES[
        (candidates.signature(op), mesh, ())]  # the newest stays
