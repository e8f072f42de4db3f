"""A reshard per tensor and target layout, and one-operand consumers priced (issue 24, causes 2
and 3).

A tensor that several consumers need in one layout is resharded once: one edge in the plan,
naming every consumer, one set of collectives in the lowered program, its bytes sent once. A
pending sum that one-operand ops (relu, exp, a norm's pow) need reduced is reduced once, not
once per op: their needs are priced with the tensor's other consumers'. Each case runs on the
simulated mesh against serial numpy (forward, bytes, gradients), and the shared gather also on 4
MPI ranks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sharded_runs import assert_mpi_equals_serial, assert_simulated_equals_serial

import spmdrules as sr
from spmdrules import ops
from spmdrules.completion import complete
from spmdrules.completion.explain import explain
from spmdrules.completion.reshard_plans import plan_reshard
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.lowering import lower
from spmdrules.execution.mpi import run_mpi
from spmdrules.execution.program import Collective, Program
from spmdrules.execution.simulated import run_simulated
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])


def _feeds(g: Graph, seed: int = 1) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {t.name: rng.uniform(0.5, 1.5, t.shape) for t in g.tensors if t.producer is None}


def _collectives(prog: Program) -> list[Collective]:
    return [c for c in prog.instructions if isinstance(c, Collective)]


def _pending_sum() -> Graph:
    """A row-parallel product ``y`` (a pending sum over mp) read by three one-operand ops."""
    with Graph("pending") as g:
        x = g.input("x", [8, 16], "float64")
        w = g.input("w", [16, 12], "float64")
        shard(x, MESH, ("dp", "mp"))
        shard(w, MESH, ("mp", None))
        y = ops.matmul(x, w, name="y")
        a, b, c = ops.relu(y, name="a"), ops.exp(y, name="b"), ops.tanh(y, name="c")
        ops.add_n([a, b, c], name="loss")
    return g


def _three_slices(other: bool = False) -> Graph:
    """``x`` split on its columns, cut into q, k and v along them: each slice needs the columns
    whole (``other``: one more consumer, a softmax over the rows, needs the rows whole)."""
    with Graph("qkv") as g:
        x = g.input("x", [8, 24], "float64")
        shard(x, MESH, ("dp", "mp"))
        q = ops.slice(x, axes=[1], starts=[0], ends=[8], name="q")
        k = ops.slice(x, axes=[1], starts=[8], ends=[16], name="k")
        v = ops.slice(x, axes=[1], starts=[16], ends=[24], name="v")
        out = [ops.multiply(q, k, name="qk"), v]
        if other:
            down = ops.softmax(x, axis=0, name="down")
            out.append(ops.slice(down, axes=[1], starts=[0], ends=[8]))
        ops.add_n(out, name="loss")
    return g


def test_a_pending_sum_one_operand_consumers_need_is_reduced_once() -> None:
    g = _pending_sum()
    r = complete(g)
    [edge] = r.reshards  # not one per consumer
    assert edge.tensor == "y" and edge.dst == sr.DistAttr(MESH, [0, -1])
    ar = plan_reshard(sr.DistAttr(MESH, [0, -1], {1: "sum"}), sr.DistAttr(MESH, [0, -1]),
                      (8, 12), "float64")
    assert [s.kind for s in ar.steps] == ["all_reduce"]
    assert r.bytes_moved == ar.total_bytes
    prog = lower(r)
    assert [c.kind for c in _collectives(prog)] == ["all_reduce"]
    assert prog.predicted_bytes == ar.total_bytes
    assert_simulated_equals_serial(g, _feeds(g), prog=prog, what="pending: ")


def test_consumers_needing_one_layout_share_one_reshard_in_plan_program_and_explain() -> None:
    g = _three_slices()
    r = complete(g)
    [edge] = r.reshards
    assert edge.tensor == "x" and edge.dst == sr.DistAttr(MESH, [0, -1])
    assert sorted(op for op, _ in edge.consumers) == ["k", "q", "v"]
    gather = edge.plan()
    assert [s.kind for s in gather.steps] == ["all_gather"]
    assert r.bytes_moved == gather.total_bytes  # priced once, not three times
    assert "-> k, q, v" in r.summary()
    assert "into k, q, v: [0,1] => [0,-1]" in explain(r, "x")
    prog = lower(r)
    [coll] = _collectives(prog)
    assert coll.kind == "all_gather" and coll.predicted_bytes == gather.total_bytes
    # every slice reads the one gathered buffer
    reads = {prog.calls[op].inputs[0] for op in ("q", "k", "v")}
    assert reads == {coll.dst}
    feeds = _feeds(g)
    res = run_simulated(prog, feeds)
    assert res.traffic.planned_bytes == gather.total_bytes
    assert_simulated_equals_serial(g, feeds, prog=prog, what="qkv: ")


def test_consumers_needing_different_layouts_get_one_reshard_each() -> None:
    g = _three_slices(other=True)
    r = complete(g)
    edges = {e.dst.mapping_str(): sorted(op for op, _ in e.consumers)
             for e in r.reshards_of("x")}
    assert edges == {"[0,-1]": ["k", "q", "v"], "[-1,1]": ["down"]}
    prog = lower(r)
    assert len([c for c in _collectives(prog) if c.edge.startswith("x ")]) == 2
    assert_simulated_equals_serial(g, _feeds(g), prog=prog, what="qkv+rows: ")


@pytest.mark.mpi
@pytest.mark.timeout(240)
def test_a_shared_gather_on_4_mpi_ranks_equals_serial_forward_and_reverse() -> None:
    g = _three_slices()
    prog = lower(complete(g))
    assert len(_collectives(prog)) == 1
    feeds = _feeds(g)
    assert_mpi_equals_serial(g, feeds, prog=prog, timeout=120)
    gp = gradient_program(prog, ["loss"])
    seed = np.random.default_rng(2).standard_normal(prog.buffers["loss"].shape)
    fed = {**feeds, gp.seeds["loss"]: seed}
    want = run_simulated(gp, fed)
    run = run_mpi(gp, fed, nprocs=4, fetch=list(gp.grads.values()), timeout=120)
    assert run.traffic.mismatches(gp) == []
    for t, b in gp.grads.items():
        np.testing.assert_allclose(run.values[b], want.fetch(b), rtol=0, atol=1e-12,
                                   err_msg=t)
