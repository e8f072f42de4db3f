"""examples.resnet_block: conv2d, batch_norm (training and inference statistics), relu, max
pool, residual add, global avg pool, flatten and a linear head, run sharded forward and in reverse
on the simulated mesh and under mpiexec, equal to serial numpy (1e-12 in float64), in data,
spatial (H and W) and data + spatial layouts on a 2x2 mesh; bytes equal to the plans and to the
halos' boxes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sharded_runs import assert_mpi_equals_serial_forward_and_reverse, halo_predictions

import spmdrules as sr
from spmdrules.completion import complete
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.executor import max_error, random_feeds, run_serial
from spmdrules.execution.gradcheck import check_gradients
from spmdrules.execution.lowering import lower
from spmdrules.execution.program import Program
from spmdrules.execution.simulated import run_simulated
from spmdrules.graph.examples import RESNET_LAYOUTS, RESNET_OPS, resnet_block
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["a", "b"])
OUT = "head.add"


def _setup(layout: str, training: bool) -> tuple[Graph, Program, Program, dict[str, Any],
                                                  dict[str, Any]]:
    g = resnet_block(MESH, layout=layout, training=training)
    prog = lower(complete(g))
    gp = gradient_program(prog, [OUT])
    feeds = random_feeds(prog, seed=1)
    for k in feeds:
        if k.endswith("running_var"):
            feeds[k] = np.abs(feeds[k]) + 0.5  # a variance
    seeds = {OUT: np.random.default_rng(2).standard_normal(prog.buffers[OUT].shape)}
    feeds[gp.seeds[OUT]] = seeds[OUT]
    return g, prog, gp, feeds, seeds


def test_the_block_has_its_ops() -> None:
    g = resnet_block(MESH)
    assert len(g.ops) == RESNET_OPS
    assert {op.type for op in g.ops} >= {"conv2d", "batch_norm", "relu", "pool2d", "add",
                                          "flatten", "matmul"}
    with pytest.raises(sr.SpmdError, match="layout"):
        resnet_block(MESH, layout="pipeline")


@pytest.mark.parametrize("training", [True, False], ids=["train", "infer"])
@pytest.mark.parametrize("layout", RESNET_LAYOUTS)
def test_simulated_equals_serial_forward_and_reverse(layout: str, training: bool) -> None:
    g, prog, gp, feeds, seeds = _setup(layout, training)
    sim = run_simulated(gp, feeds)
    serial = run_serial(g, {k: feeds[k] for k in prog.feeds})
    err, where = max_error({t: sim.fetch(t) for t in prog.tensors}, serial)
    assert err <= 1e-12, where
    checks = check_gradients(g, feeds, seeds, {t: sim.fetch(b) for t, b in gp.grads.items()},
                             directions=1, entries=1)
    assert max(c.error for c in checks) <= 1e-7
    assert sim.traffic.mismatches(gp) == []
    assert sim.traffic.halo == halo_predictions(gp)
    assert bool(halo_predictions(prog)) == (layout != "data")


@pytest.mark.mpi
@pytest.mark.timeout(300)
@pytest.mark.parametrize("layout", RESNET_LAYOUTS)
def test_mpi_equals_serial_forward_and_reverse(layout: str) -> None:
    g, prog, gp, feeds, seeds = _setup(layout, training=True)
    assert_mpi_equals_serial_forward_and_reverse(g, prog, gp, feeds, seeds)
