"""Spatially split upsampling (issue 26): nearest_interp and bilinear_interp keep a split H (and
W) through uneven blocks, each rank computing its output block from a slab of its own rows and
the halo its source positions read; run on the simulated mesh and under mpiexec, forward and
reverse, equal to serial numpy, with the bytes sent equal to the halos' boxes. Nearest at an
integer scale over even blocks exchanges nothing; bilinear one row of each neighbour."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sharded_runs import (
    assert_mpi_equals_serial_forward_and_reverse,
    assert_simulated_equals_serial,
    halo_predictions,
    halo_rows,
)

import spmdrules as sr
from spmdrules.completion import complete
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.executor import random_feeds
from spmdrules.execution.lowering import lower
from spmdrules.execution.program import HaloStep
from spmdrules.execution.simulated import run_simulated
from spmdrules.graph import ops
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph

MESH_1D = sr.ProcessMesh([0, 1, 2], dim_names=["h"])
MESH_2D = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["h", "w"])


def _graph(seed: int, mesh: sr.ProcessMesh) -> Graph:
    """x [2, 3, 7, 5] -> nearest (a random scale or size) -> tanh -> bilinear (random size,
    align_corners, align_mode) -> tanh -> nearest back down, every layout annotated (uneven
    blocks); tanh is smooth, so the numerical gradients see no kink."""
    rng = np.random.default_rng(seed)
    spec = (None, None, "h", "w") if mesh.ndim == 2 else (None, None, "h", None)
    with Graph(f"upsample{seed}") as g:
        x = g.input("x", [2, 3, 7, 5], "float64")
        if seed % 2:
            a = ops.nearest_interp(x, scale=[2.0, 3.0], align_corners=False, name="near")
        else:
            a = ops.nearest_interp(x, out_h=int(rng.integers(8, 20)), out_w=11,
                                   align_corners=bool(rng.random() < 0.5), name="near")
        b = ops.tanh(a, name="t1")
        c = ops.bilinear_interp(b, out_h=int(rng.integers(b.shape[2], 2 * b.shape[2])),
                                out_w=int(rng.integers(b.shape[3], 2 * b.shape[3])),
                                align_corners=bool(rng.random() < 0.5),
                                align_mode=int(rng.integers(2)), name="bilinear")
        d = ops.tanh(c, name="t2")
        e = ops.nearest_interp(d, out_h=c.shape[2] // 2 + 1, out_w=9, align_corners=False,
                               name="down")
    for t in (x, a, b, c, d, e):
        shard(t, mesh, spec)
    return g


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mesh", [MESH_1D, MESH_2D], ids=["1d", "2d"])
def test_upsample_halos_run_equal_to_serial_forward_and_reverse(
        seed: int, mesh: sr.ProcessMesh) -> None:
    g = _graph(seed, mesh)
    res = complete(g)
    assert not res.reshards, "every layout is kept through the interpolations"
    prog = lower(res)
    halos = [i for i in prog.instructions if isinstance(i, HaloStep)]
    assert any(h.op == "bilinear" for h in halos)
    feeds = random_feeds(prog, seed=seed)
    assert_simulated_equals_serial(g, feeds, prog=prog, loss="down")
    gp = gradient_program(prog, ["down"])
    ct = np.random.default_rng(1).standard_normal(prog.buffers["down"].shape)
    sim = run_simulated(gp, {**feeds, gp.seeds["down"]: ct})
    assert sim.traffic.halo == halo_predictions(gp)
    assert any(k.startswith("grad[halo") for k in sim.traffic.halo)


def _rows(op: Any, n: int) -> list[tuple[int, int]]:
    """The rows each of 2 ranks borrows (left, right) for ``op`` on x [1, 2, n, 3], H split."""
    with Graph("rows") as g:
        x = g.input("x", [1, 2, n, 3], "float64")
        op(x)
    shard(x, sr.ProcessMesh([0, 1], dim_names=["h"]), (None, None, "h", None))
    return halo_rows(lower(complete(g)), 2, [(0,), (1,)])


def test_nearest_at_integer_scale_moves_nothing_bilinear_one_row_each_side() -> None:
    assert _rows(lambda x: ops.nearest_interp(x, scale=[2.0, 2.0], align_corners=False), 8) == []
    assert _rows(lambda x: ops.bilinear_interp(x, scale=[2.0, 2.0], align_corners=False,
                                               align_mode=0), 8) == [(0, 1), (1, 0)]
    # align_corners, 8 rows to 15 (source j / 2): rank 0's last output (7) reads rows 3 and 4,
    # rank 1's first (8) exactly row 4, its own
    assert _rows(lambda x: ops.bilinear_interp(x, out_h=15, out_w=5), 8) == [(0, 1), (0, 0)]
    # uneven blocks (4 and 3 rows, outputs 7 and 7): rank 1's first output reads row 3
    assert _rows(lambda x: ops.nearest_interp(x, scale=[2.0, 2.0], align_corners=False), 7) \
        == [(0, 0), (1, 0)]


@pytest.mark.mpi
@pytest.mark.timeout(200)
@pytest.mark.parametrize(("seed", "mesh"), [(1, MESH_2D), (2, MESH_1D)], ids=["2d", "1d"])
def test_upsample_halos_on_mpi_equal_serial_forward_and_reverse(
        seed: int, mesh: sr.ProcessMesh) -> None:
    g = _graph(seed, mesh)
    prog = lower(complete(g))
    gp = gradient_program(prog, ["down"])
    feeds = random_feeds(prog, seed=5)
    seeds = {"down": np.random.default_rng(6).standard_normal(prog.buffers["down"].shape)}
    feeds[gp.seeds["down"]] = seeds["down"]
    assert_mpi_equals_serial_forward_and_reverse(g, prog, gp, feeds, seeds,
                                                 nprocs=len(mesh.process_ids), timeout=180)
