"""A pending sum carried through the ops that only relabel its elements (issue 24, cause 5).

The mixture-of-experts down projection: the experts' activations ``[T*k, F]`` times the
row-parallel weight ``[F, H]`` (F split on mp) leave a pending sum over mp on ``[T*k, H]``. The
combine regroups it per token (reshape, unsqueeze, squeeze), weighs it by the router's weights
and sums over the top-k dim. Paddle's squeeze and unsqueeze reduce a pending sum first
(docs/deviations/shape.md, ``shape-op-keeps-partial``); ours carry it to where a consumer needs
it whole, and the plan runs sharded equal to serial numpy, on the simulated mesh and on MPI.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sharded_runs import assert_mpi_equals_serial, assert_simulated_equals_serial

import spmdrules as sr
from spmdrules import ops
from spmdrules.completion import complete
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.lowering import lower
from spmdrules.execution.simulated import run_simulated
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])


def moe_down(tokens: int = 16, top_k: int = 2, ffn: int = 8, hidden: int = 12,
             dtype: str = "float64") -> Graph:
    """The down projection and the top-k combine of a mixture of experts, tokens on dp and the
    experts' FFN dim on mp (row-parallel)."""
    t, k = tokens, top_k
    with Graph("moe_down") as g:
        act = g.input("act", [t * k, ffn], dtype)            # the experts' activations, top-k rows
        w = g.param("w_down", [ffn, hidden], dtype)
        gates = g.input("gates", [t, k], dtype)              # the router's top-k weights
        resid = g.input("resid", [t, hidden], dtype)
        shard(act, MESH, ("dp", "mp"))
        shard(w, MESH, ("mp", None))
        shard(gates, MESH, ("dp", None))
        shard(resid, MESH, ("dp", None))
        y = ops.matmul(act, w, name="down")                  # [T*k, H], pending sum over mp
        y = ops.unsqueeze(y, axis=[1], name="rows")          # [T*k, 1, H]
        y = ops.reshape(y, shape=[t, k, 1, hidden], name="per_token")
        y = ops.squeeze(y, axis=[2], name="experts")         # [T, k, H]
        y = ops.multiply(y, ops.unsqueeze(gates, axis=[2], name="gate_col"), name="weighted")
        y = ops.sum(y, axis=[1], name="combine")             # the top-k sum, [T, H]
        y = ops.add(y, resid, name="out")
        ops.multiply(y, y, name="loss")
    return g


def _feeds(g: Graph) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {t.name: rng.standard_normal(t.shape) for t in g.tensors if t.producer is None}


def test_the_pending_sum_is_reduced_once_after_the_top_k_sum() -> None:
    tokens, top_k, hidden = 16, 2, 12
    r = complete(moe_down(tokens, top_k, hidden=hidden))
    for name in ("down", "rows", "per_token", "experts", "weighted", "combine"):
        assert r.attr(name).partial == {1: "sum"}, name
    [edge] = r.reshards  # one reduction, where the residual add needs the combine whole
    assert (edge.tensor, edge.op) == ("combine", "out")
    # a ring all-reduce over mp (2 processes) of each dp block [T/2, H] of float64, summed over
    # the 4 processes: 2 * (2-1)/2 of the block each; reduced before the unsqueeze it would be
    # top_k times as much ([T*k, H])
    block = tokens // 2 * hidden * 8
    assert sum(p.total_bytes for p in r.plans()) == 4 * block


def test_the_moe_combine_runs_sharded_equal_to_serial_forward_and_reverse() -> None:
    g = moe_down()
    assert_simulated_equals_serial(g, _feeds(g), prog=lower(complete(g)))


def test_the_gradient_reduces_the_cotangent_once_and_moves_the_plans_bytes() -> None:
    # the dual of the forward: the cotangent of the pending sum is whole, the all-reduce's adjoint
    # is one all-reduce of the combine's cotangent, and the bytes sent are the plans'
    g = moe_down()
    prog = lower(complete(g))
    gp = gradient_program(prog, ["loss"])
    feeds = _feeds(g)
    feeds[gp.seeds["loss"]] = np.random.default_rng(1).standard_normal(prog.buffers["loss"].shape)
    res = run_simulated(gp, feeds)
    assert [e.label for e in gp.edges] == ["combine -> out", "grad[combine -> out]"]
    assert res.traffic.mismatches(gp) == []


@pytest.mark.mpi
def test_the_moe_combine_runs_on_4_mpi_ranks_equal_to_serial() -> None:
    g = moe_down()
    assert_mpi_equals_serial(g, _feeds(g), prog=lower(complete(g)), timeout=120)
