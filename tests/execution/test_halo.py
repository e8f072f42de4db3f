"""Spatial sharding through halos: conv (spatial_sharding) and pooling lowered to HaloStep, run
on the simulated mesh and under real mpiexec, forward and reverse, equal to serial numpy; the
bytes each HaloExchange moves equal what its boxes predict."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sharded_runs import (
    assert_mpi_equals_serial_forward_and_reverse,
    halo_predictions,
    halo_rows,
)

import spmdrules as sr
from spmdrules.completion import complete
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.executor import max_error, random_feeds, run_serial
from spmdrules.execution.gradcheck import check_gradients
from spmdrules.execution.lowering import lower
from spmdrules.execution.program import HaloStep, Program
from spmdrules.execution.simulated import run_simulated
from spmdrules.graph import ops
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph

MESH_1D = sr.ProcessMesh([0, 1, 2], dim_names=["h"])
MESH_2D = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["h", "w"])


def _windows(rng: np.random.Generator) -> dict[str, Any]:
    k = [int(rng.integers(1, 4)) for _ in range(2)]
    return {"k": k, "s": [int(rng.integers(1, 3)) for _ in range(2)],
            "p": [int(rng.integers(0, ki // 2 + 1)) for ki in k for _ in (0, 1)],
            "d": [int(rng.integers(1, 3)) for _ in range(2)],
            "ceil": bool(rng.random() < 0.5)}


def _graph(seed: int, mesh: sr.ProcessMesh) -> Graph:
    """conv2d (spatial) -> relu -> windowed pool -> conv2d (spatial) -> global avg pool, with
    uneven spatial blocks (the intermediate layouts annotated, as completion only infers even
    splits)."""
    rng = np.random.default_rng(seed)
    spec = (None, None, "h", "w") if mesh.ndim == 2 else (None, None, "h", None)
    a, b = _windows(rng), _windows(rng)
    with Graph(f"halo{seed}") as g:
        x = g.input("x", [2, 3, 13, 11], "float64")
        f1 = g.param("f1", [4, 3, *a["k"]], "float64")
        f2 = g.param("f2", [2, 4, 3, 2], "float64")
        y = ops.conv2d(x, f1, strides=a["s"], paddings=a["p"], dilations=a["d"],
                       spatial_sharding=True, name="conv1")
        r = ops.relu(y, name="relu")
        z = ops.pool2d(r, kernel_size=b["k"], strides=b["s"], paddings=b["p"],
                       ceil_mode=b["ceil"], pooling_type="max" if seed % 2 else "avg",
                       exclusive=bool(seed % 3), name="pool")
        c = ops.conv2d(z, f2, paddings=[1, 0], spatial_sharding=True, name="conv2")
        ops.pool2d(c, kernel_size=[1, 1], global_pooling=True, pooling_type="avg", name="gap")
    for t in (x, y, r, z, c):
        shard(t, mesh, spec)
    return g


def _programs(g: Graph) -> tuple[Program, Program, dict[str, Any], dict[str, Any]]:
    prog = lower(complete(g))
    out = prog.tensors[-1]
    gp = gradient_program(prog, [out])
    feeds = random_feeds(prog, seed=5)
    seeds = {out: np.random.default_rng(6).standard_normal(prog.buffers[out].shape)}
    feeds[gp.seeds[out]] = seeds[out]
    return prog, gp, feeds, seeds


def _transpose_graph(seed: int, mesh: sr.ProcessMesh) -> Graph:
    """conv2d_transpose (spatial: random kernel, stride, paddings, dilation, output_padding) ->
    tanh -> conv2d (spatial), on uneven spatial blocks (every layout annotated; tanh is smooth,
    so the numerical gradients see no kink)."""
    rng = np.random.default_rng(seed)
    spec = (None, None, "h", "w") if mesh.ndim == 2 else (None, None, "h", None)
    a = _windows(rng)
    # a pad within the window's reach, an output_padding below the stride (the output then
    # convolves back to the input)
    a["p"] = [min(p, (k - 1) * d // 2) for p, k, d in zip(a["p"], [k for k in a["k"] for _ in (0, 1)],
                                                        [d for d in a["d"] for _ in (0, 1)],
                                                        strict=True)]
    opad = [int(rng.integers(0, s)) for s in a["s"]]
    with Graph(f"halo_t{seed}") as g:
        x = g.input("x", [2, 3, 13, 11], "float64")
        f1 = g.param("f1", [3, 4, *a["k"]], "float64")
        f2 = g.param("f2", [2, 4, 3, 2], "float64")
        y = ops.conv2d_transpose(x, f1, strides=a["s"], paddings=a["p"], dilations=a["d"],
                                 output_padding=opad, spatial_sharding=True, name="up")
        r = ops.tanh(y, name="tanh")
        c = ops.conv2d(r, f2, paddings=[1, 0], spatial_sharding=True, name="conv")
    for t in (x, y, r, c):
        shard(t, mesh, spec)
    return g


def _check_simulated(g: Graph) -> None:
    """Forward equal to serial, gradients to numerical ones, halo bytes to the predictions
    (forward and adjoint)."""
    prog, gp, feeds, seeds = _programs(g)
    halos = [i for i in prog.instructions if isinstance(i, HaloStep)]
    assert halos, "a spatially sharded windowed op lowers to a HaloExchange"
    sim = run_simulated(gp, feeds)
    serial = run_serial(g, {k: feeds[k] for k in prog.feeds})
    got = {t: sim.fetch(t) for t in prog.tensors}
    err, where = max_error(got, serial)
    assert err <= 1e-12, where
    grads = {t: sim.fetch(b) for t, b in gp.grads.items()}
    checks = check_gradients(g, feeds, seeds, grads, directions=1, entries=2)
    assert max(c.error for c in checks) <= 1e-7
    assert sim.traffic.halo == halo_predictions(gp)
    assert any(k.startswith("grad[halo") for k in sim.traffic.halo)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("mesh", [MESH_1D, MESH_2D], ids=["1d", "2d"])
def test_halos_run_equal_to_serial_forward_and_reverse(seed: int, mesh: sr.ProcessMesh) -> None:
    _check_simulated(_graph(seed, mesh))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("mesh", [MESH_1D, MESH_2D], ids=["1d", "2d"])
def test_transposed_conv_halos_run_equal_to_serial_forward_and_reverse(
        seed: int, mesh: sr.ProcessMesh) -> None:
    """conv2d_transpose keeps its spatial split: each output block is the sum of the windows
    that reach into it, read from a slab of the input; the adjoint adds the slab's cotangent
    back into the neighbours' blocks (issue 24)."""
    g = _transpose_graph(seed, mesh)
    c = complete(g)
    assert c.attr("x").dims_mapping == c.attr("up").dims_mapping
    assert not [e for e in c.reshards if e.tensor == "x"], "the split input is gathered"
    _check_simulated(g)


def test_transposed_conv_halo_is_what_its_windows_need() -> None:
    """kernel = stride, no padding (a U-Net's up-convolution): every output block is made of the
    rank's own input rows, no halo. Kernel 3, stride 2, padding 1 (output twice as long): block
    0's last output row sums input row 4, its right neighbour's first; block 1 needs nothing."""
    def halos(k: int, p: int, opad: int) -> list[tuple[int, int]]:
        with Graph("up") as g:
            x = g.input("x", [1, 2, 8, 3], "float64")
            f = g.param("f", [2, 2, k, 1], "float64")
            ops.conv2d_transpose(x, f, strides=[2, 1], paddings=[p, 0],
                                 output_padding=[opad, 0], spatial_sharding=True, name="up")
        shard(x, sr.ProcessMesh([0, 1], dim_names=["h"]), (None, None, "h", None))
        c = complete(g)
        assert c.attr("up").dims_mapping == (-1, -1, 0, -1)
        return halo_rows(lower(c), 2, [(0,), (1,)])

    assert halos(2, 0, 0) == []
    assert halos(3, 1, 1) == [(0, 1), (0, 0)]
    rule = sr.get_rule("conv2d_transpose")
    x = sr.TensorSpec([1, 1, 3, 1], sr.DistAttr(MESH_1D, [-1, -1, 0, -1]))
    f = sr.TensorSpec([1, 1, 5, 1], sr.DistAttr(MESH_1D, [-1, -1, -1, -1]))
    # output rows 0..2 sum the windows of input rows 0..2: block 0 would read past block 1
    with pytest.raises(sr.SpmdError, match="neighbouring block"):
        rule.infer_forward(x, f, spatial_sharding=True)
    assert rule.infer_forward(x, f).outputs[0].dims_mapping == (-1, -1, -1, -1)


def test_one_sided_halos_for_pooling() -> None:
    """A stride-2 pool with kernel 3 and no padding borrows only from its left neighbour: the
    halo is one-sided (seed 003); a window wider than the neighbouring block is refused."""
    with Graph("one-sided") as g:
        x = g.input("x", [1, 1, 8, 4], "float64")
        ops.pool2d(x, kernel_size=[3, 1], strides=[2, 1], name="pool")
    shard(x, MESH_1D, (None, None, "h", None))
    widths = halo_rows(lower(complete(g)), 2, [(0,), (1,), (2,)])
    assert widths == [(0, 0), (1, 0), (2, 0)]  # left only: output j reads [2j, 2j + 3)
    rule = sr.get_rule("pool2d")
    narrow = sr.TensorSpec([1, 1, 9, 4], sr.DistAttr(MESH_1D, [-1, -1, 0, -1]))
    with pytest.raises(sr.SpmdError, match="neighbouring block"):
        rule.infer_forward(narrow, kernel_size=[7, 1], strides=[1, 1], paddings=[0, 0])
    # an output shorter than the blocks (6 rows pooled by 5 to 2, on 3 processes) reads H whole
    # instead (issue 24): the split ends there, no window reaches past a neighbour
    short = sr.TensorSpec([1, 1, 6, 4], sr.DistAttr(MESH_1D, [-1, -1, 0, -1]))
    info = rule.infer_forward(short, kernel_size=[5, 1], strides=[1, 1], paddings=[0, 0])
    assert info.inputs[0].dims_mapping == info.outputs[0].dims_mapping == (-1, -1, -1, -1)


@pytest.mark.mpi
@pytest.mark.timeout(200)
@pytest.mark.parametrize(("build", "seed", "mesh"), [
    (_graph, 1, MESH_2D), (_graph, 4, MESH_1D), (_transpose_graph, 3, MESH_2D)],
    ids=["2d", "1d", "transposed-2d"])
def test_halos_on_mpi_equal_serial_forward_and_reverse(
        build: Any, seed: int, mesh: sr.ProcessMesh) -> None:
    g = build(seed, mesh)
    prog, gp, feeds, seeds = _programs(g)
    assert_mpi_equals_serial_forward_and_reverse(g, prog, gp, feeds, seeds,
                                                 nprocs=len(mesh.process_ids), timeout=180)
