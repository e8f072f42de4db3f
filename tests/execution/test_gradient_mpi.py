"""Reverse mode under real ``mpiexec`` (hard timeouts): the MPI executor's gradients of the MLP
and of the GPT decoder equal numerical derivatives of the serial model, and the simulated
executor's gradients; the bytes sent equal the plans' (forward and adjoint edges)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pipeline_cases import CASES, LIMITS, pipeline_stages

from spmdrules.completion import complete
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.executor import random_feeds
from spmdrules.execution.gradcheck import check_gradients
from spmdrules.execution.lowering import lower
from spmdrules.execution.mpi import run_mpi
from spmdrules.execution.simulated import run_simulated

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(150)
@pytest.mark.parametrize(("case", "nprocs"), [("2d-megatron", 4), ("2d-gpt", 4), ("2d-llama", 4),
                                               ("3d-mixed-coshard", 8)])
def test_mpi_gradients_equal_the_serial_numerical_ones(case: str, nprocs: int) -> None:
    g = CASES[case]()
    prog = lower(complete(g))
    out = prog.tensors[-1]
    gp = gradient_program(prog, [out])
    feeds = random_feeds(prog, seed=11, vocab_limits=LIMITS)
    seeds = {out: np.random.default_rng(4).standard_normal(prog.buffers[out].shape)}
    feeds[gp.seeds[out]] = seeds[out]
    run = run_mpi(gp, feeds, nprocs=nprocs, fetch=list(gp.grads.values()), timeout=120)
    grads = {t: run.values[b] for t, b in gp.grads.items()}
    checks = check_gradients(g, feeds, seeds, grads, directions=1, entries=1)
    worst = max(checks, key=lambda c: c.error)
    assert worst.error <= 1e-7, worst
    sim = run_simulated(gp, feeds)
    for t, b in gp.grads.items():
        np.testing.assert_allclose(grads[t], sim.fetch(b), rtol=1e-12, atol=1e-12)
    assert run.traffic.mismatches(gp) == []
    assert run.traffic.per_edge == sim.traffic.per_edge
    assert any(label.startswith("grad[") for label in run.traffic.per_edge)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("w1_spec", [("mp", None), (None, "mp")])
def test_mpi_gradients_across_pipeline_stages(w1_spec: tuple[Any, ...]) -> None:
    g = pipeline_stages(w1_spec)
    prog = lower(complete(g))
    gp = gradient_program(prog, ["out"])
    feeds = random_feeds(prog, seed=5)
    seeds = {"out": np.random.default_rng(6).standard_normal(prog.buffers["out"].shape)}
    feeds[gp.seeds["out"]] = seeds["out"]
    run = run_mpi(gp, feeds, nprocs=8, fetch=list(gp.grads.values()), timeout=120)
    sim = run_simulated(gp, feeds)
    for b in gp.grads.values():
        np.testing.assert_allclose(run.values[b], sim.fetch(b), rtol=1e-12, atol=1e-12)
    checks = check_gradients(g, feeds, seeds, {t: run.values[b] for t, b in gp.grads.items()})
    assert max(c.error for c in checks) <= 1e-7
    assert run.traffic.mismatches(gp) == []
    assert run.traffic.per_edge == sim.traffic.per_edge
