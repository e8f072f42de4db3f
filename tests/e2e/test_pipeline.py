"""Annotate, complete, lower, run on the simulated mesh: the serial answer, and the plan's bytes.

Every case runs float64 data through a float64 graph, so the bytes counted must equal the plans'
totals exactly, and every tensor must equal the serial numpy result to 1e-12 (relative to its
scale).
"""

from __future__ import annotations

import numpy as np
import pytest
from pipeline_cases import CASES, LIMITS, MEGATRON2, MESH2, mlp64

from spmdrules import examples
from spmdrules.completion import complete
from spmdrules.execution.executor import max_error, random_feeds, run_serial
from spmdrules.execution.lowering import lower
from spmdrules.execution.program import Collective
from spmdrules.execution.simulated import run_simulated


@pytest.mark.parametrize("name", sorted(CASES))
def test_pipeline_reproduces_serial_and_the_plans_bytes(name: str) -> None:
    g = CASES[name]()
    r = complete(g)
    prog = lower(r)
    feeds = random_feeds(prog, seed=7, vocab_limits=LIMITS)
    res = run_simulated(prog, feeds)
    err, worst = max_error(res.fetch_all(), run_serial(g, feeds))
    assert err <= 1e-12, f"{name}: {worst} differs by {err}"
    if "uneven" in name:
        # plans price the largest block; uneven blocks send no more than that
        for label, want in res.traffic.predicted(prog).items():
            assert res.traffic.per_edge.get(label, 0) <= want
    else:
        assert res.traffic.mismatches(prog) == []
    assert set(res.traffic.per_edge) <= {e.label for e in prog.edges}


def test_cases_cover_every_collective_kind() -> None:
    kinds: set[str] = set()
    for build in CASES.values():
        prog = lower(complete(build()))
        kinds |= {i.kind for i in prog.instructions if isinstance(i, Collective)}
    assert {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "slice"} <= kinds


def test_float64_data_through_a_float32_graph_sends_twice_the_plan() -> None:
    g = examples.mlp(MESH2, batch=4, seq=8, hidden=16, ffn=32)
    prog = lower(complete(g))
    feeds = random_feeds(prog, seed=1)
    res = run_simulated(prog, feeds)
    [edge] = prog.edges
    assert res.traffic.per_edge[edge.label] == 2 * edge.plan.total_bytes
    assert res.traffic.mismatches(prog) == []


def test_a_wrong_kernel_block_is_named() -> None:
    from spmdrules.execution.executor import ExecutionError

    g = mlp64(MESH2, MEGATRON2)
    prog = lower(complete(g))
    feeds = random_feeds(prog, seed=1)
    feeds["x"] = np.zeros((1, 2, 3))
    with pytest.raises(ExecutionError, match="'x' has shape"):
        run_simulated(prog, feeds)
