"""The GPT block forward on 4 MPI ranks against the same model run serially in numpy; with
``--conv``, a spatially sharded conv2d layer on 2 ranks against the same layer in serial numpy.

    mpiexec -n 4 .venv/bin/python bench/e2e.py [--layers 1] [--reps 5]   (plain python relaunches)
    mpiexec -n 2 .venv/bin/python bench/e2e.py --conv [--reps 3]

``--conv``: conv2d of x [8, 64, 128, 128] (float64) with a 3x3 filter [64, 64, 3, 3], padding 1,
``spatial_sharding=True``, H split over the 2 ranks: each rank exchanges a one-row halo with its
neighbour (HaloStep) and convolves its slab. One BLAS thread per rank, and one for the serial
layer (run on rank 0 after the parallel runs), so the comparison is fair. Reports the speedup
and the share of the sharded run spent in the halo exchange.

Every rank builds, annotates (Megatron-style on a 2x2 mesh), completes and lowers the same GPT
decoder, then runs the forward ``--reps`` times with the MPI executor; rank 0 also runs the serial
numpy forward and checks every tensor. Then it runs forward and reverse mode together (the
gradient program of spmdrules.execution.adjoint, seeded with the loss) and checks the gradients against
the simulated executor's. Reports time per phase, the measured communication time against the
plan's alpha-beta prediction under the default cost model (calibrated on this machine class,
spmdrules/calibration.json) and under one calibrated here (bench/calibrate.py's measurements,
taken in the same job), and the parameters measured here.
"""

from __future__ import annotations

import os
import sys

if "--conv" in sys.argv:  # one BLAS thread per rank (and for the serial layer): set before numpy
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = "1"

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import calibrate  # bench/ is not a package: found through the path entry above
import numpy as np

from spmdrules.completion import complete
from spmdrules.completion.cost import DEFAULT_COST_MODEL, CostModel
from spmdrules.core.mesh import ProcessMesh
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.executor import max_error, random_feeds, run_serial
from spmdrules.execution.lowering import lower
from spmdrules.execution.program import Collective, Program
from spmdrules.execution.simulated import run_simulated
from spmdrules.graph.examples import gpt_decoder
from spmdrules.phases import Phases

SIZES = {"batch": 8, "seq": 128, "hidden": 256, "heads": 8, "ffn": 1024, "vocab": 2048}

_ROUNDS = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1, "all_to_all": 1}


def predicted_seconds(prog: Program, cost: CostModel, itemsize: int) -> tuple[float, float]:
    """(planned reshards, ops' own reductions): alpha-beta seconds of every collective step,
    with the bytes of the data actually moved (``itemsize`` per element)."""
    planned = internal = 0.0
    for ins in prog.instructions:
        if not isinstance(ins, Collective) or ins.mesh_dim is None:
            continue
        lay = prog.buffers[ins.src]
        n = lay.mesh.shape[ins.mesh_dim]
        rounds = _ROUNDS.get(ins.kind, 0) * (n - 1)
        local = max(lay.local_nbytes(c) for c in _coords(lay.mesh)) * itemsize
        local //= max(1, _declared(lay.dtype))
        if ins.kind == "all_reduce":
            nbytes = 2 * (n - 1) / n * local
        elif ins.kind == "all_gather":
            nbytes = (n - 1) * local
        elif ins.kind in ("reduce_scatter", "all_to_all"):
            nbytes = (n - 1) / n * local
        else:
            nbytes = 0.0
        t = cost.step_time(lay.mesh, ins.mesh_dim, rounds, nbytes)
        if ins.predicted_bytes is None:
            internal += t
        else:
            planned += t
    return planned, internal


def _declared(dtype: str) -> int:
    from spmdrules.graph.shapes import DTYPE_BYTES

    return DTYPE_BYTES[dtype]


def _coords(mesh: ProcessMesh) -> list[tuple[int, ...]]:
    from spmdrules.execution.program import mesh_coords

    return list(mesh_coords(mesh).values())


def conv_main(reps: int) -> int:
    """The spatially sharded conv2d layer on 2 ranks against serial numpy."""
    from mpi4py import MPI

    from spmdrules.execution.mpi import MPIExecutor
    from spmdrules.graph import ops
    from spmdrules.graph.annotate import shard
    from spmdrules.graph.graph import Graph

    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        raise SystemExit("run with mpiexec -n 2 ... --conv")
    mesh = ProcessMesh([0, 1], dim_names=["h"])
    with Graph("conv-layer") as g:
        x = g.input("x", [8, 64, 128, 128], "float64")
        w = g.param("w", [64, 64, 3, 3], "float64")
        ops.conv2d(x, w, paddings=[1, 1], spatial_sharding=True, name="conv")
    shard(x, mesh, (None, None, "h", None))
    prog = lower(complete(g))
    feeds = random_feeds(prog, seed=0)
    ex = MPIExecutor(prog, comm)
    runs: list[float] = []
    halo: list[float] = []
    blocks: dict[str, Any] = {}
    report = None
    for i in range(reps + 1):
        blocks, report = ex.run(feeds)
        total = ex.reduce_reports(report)
        if i and total is not None:
            runs.append(total.seconds["run"])
            halo.append(total.seconds["collective"])
    values = ex.fetch(blocks, ["conv"])
    assert report is not None
    traffic = ex.reduce_reports(report)
    if comm.Get_rank() != 0:
        return 0
    assert values is not None and traffic is not None
    serial_times = []
    serial: dict[str, Any] = {}
    for _ in range(reps):
        t = time.perf_counter()
        serial = run_serial(g, feeds)
        serial_times.append(time.perf_counter() - t)
    err, _ = max_error(values, {"conv": serial["conv"]})
    med = statistics.median
    print(f"conv2d x [8, 64, 128, 128] * w [64, 64, 3, 3], padding 1, float64; H split over 2 "
          f"ranks on {os.cpu_count()} cores, 1 BLAS thread each; medians of {reps} runs")
    print(f"{'serial numpy (1 process)':<44} {med(serial_times) * 1e3:10.1f} ms")
    print(f"{'sharded on 2 ranks (slowest rank)':<44} {med(runs) * 1e3:10.1f} ms")
    print(f"{'  of which halo exchange (slowest rank)':<44} {med(halo) * 1e3:10.1f} ms "
          f"({100 * med(halo) / med(runs):.1f} %)")
    print(f"{'speedup':<44} {med(serial_times) / med(runs):10.2f} x")
    print(f"halo bytes {traffic.traffic.halo}; result "
          f"{'matches' if err <= 1e-12 else 'DOES NOT match'} serial numpy (max relative error "
          f"{err:.1e})")
    return 0


def main() -> int:
    from mpi4py import MPI

    from spmdrules.execution.mpi import MPIExecutor

    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--conv", action="store_true",
                    help="the spatially sharded conv2d layer on 2 ranks instead of the GPT block")
    args = ap.parse_args()
    if args.conv:
        return conv_main(args.reps)
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    if comm.Get_size() != 4:
        raise SystemExit("run with mpiexec -n 4")
    phases = Phases()
    with phases("build + annotate"):
        mesh = ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
        g = gpt_decoder(args.layers, mesh, **SIZES)  # type: ignore[arg-type]
    with phases("complete"):
        r = complete(g)
    with phases("lower"):
        prog = lower(r)
    feeds = random_feeds(prog, seed=0, vocab_limits={
        "input_ids": SIZES["vocab"], "labels": SIZES["vocab"], "position_ids": SIZES["seq"]})
    with phases("executor setup (communicators)"):
        ex = MPIExecutor(prog, comm)
    runs: list[float] = []
    comms: list[float] = []
    kern: list[float] = []
    blocks: dict[str, Any] = {}
    report = None
    for i in range(args.reps + 1):
        blocks, report = ex.run(feeds)
        total = ex.reduce_reports(report)
        if i and total is not None:  # the first run warms up caches
            runs.append(total.seconds["run"])
            comms.append(total.seconds["collective"])
            kern.append(total.seconds["kernel"] + total.seconds["local"])
    with phases("fetch every tensor to rank 0"):
        values = ex.fetch(blocks, list(prog.tensors))
    assert report is not None
    traffic = ex.reduce_reports(report)
    synced: list[float] = []
    for _ in range(args.reps):
        _, sreport = ex.run(feeds, sync_collectives=True)
        stotal = ex.reduce_reports(sreport)
        if stotal is not None:
            synced.append(stotal.seconds["collective"])
    gp = gradient_program(prog, ["loss"])
    feeds[gp.seeds["loss"]] = np.asarray(1.0)
    gex = MPIExecutor(gp, comm)
    both: list[float] = []
    for i in range(args.reps + 1):
        gblocks, greport = gex.run(feeds)
        gtotal = gex.reduce_reports(greport)
        if i and gtotal is not None:
            both.append(gtotal.seconds["run"])
    grads = gex.fetch(gblocks, list(gp.grads.values()))
    results = calibrate.measure(comm)
    if rank != 0:
        return 0
    assert values is not None and traffic is not None
    serial_times = []
    serial: dict[str, Any] = {}
    for _ in range(args.reps):
        t = time.perf_counter()
        serial = run_serial(g, feeds)
        serial_times.append(time.perf_counter() - t)
    err, worst = max_error(values, serial)
    sim = run_simulated(gp, feeds)
    assert grads is not None
    g_err, g_worst = max_error(grads, {b: sim.fetch(b) for b in gp.grads.values()})
    calibrated = calibrate.calibrated_cost_model(results)
    d_plan, d_int = predicted_seconds(prog, DEFAULT_COST_MODEL, 8)
    c_plan, c_int = predicted_seconds(prog, calibrated, 8)
    med = statistics.median
    print(f"GPT decoder, {args.layers} layer(s), {SIZES}, float64, 2x2 mesh (dp, mp), 4 ranks "
          f"on {os.cpu_count()} cores; medians of {args.reps} forwards")
    print(r.summary().splitlines()[2].strip())
    print()
    print(f"{'phase':<44} {'ms':>10}")
    for k, v in phases.seconds.items():
        print(f"{k:<44} {v * 1e3:10.1f}")
    print(f"{'forward on 4 ranks (slowest rank)':<44} {med(runs) * 1e3:10.1f}")
    print(f"{'  kernels and local steps (slowest rank)':<44} {med(kern) * 1e3:10.1f}")
    print(f"{'  communication (slowest rank)':<44} {med(comms) * 1e3:10.1f}")
    print(f"{'forward serial numpy (1 process)':<44} {med(serial_times) * 1e3:10.1f}")
    print(f"{'forward + reverse on 4 ranks (slowest rank)':<44} {med(both) * 1e3:10.1f}"
          f"   ({len(gp.grads)} parameter gradients)")
    print()
    print(f"{'communication':<44} {'ms':>10}")
    print(f"{'measured in the forward (waits included)':<44} {med(comms) * 1e3:10.1f}")
    print(f"{'measured, each step after a barrier':<44} {med(synced) * 1e3:10.1f}")
    print(f"{'predicted, default cost model':<44} {(d_plan + d_int) * 1e3:10.3f}"
          f"   (reshards {d_plan * 1e3:.3f} + vocab-parallel CE {d_int * 1e3:.3f})")
    print(f"{'predicted, calibrated cost model':<44} {(c_plan + c_int) * 1e3:10.3f}"
          f"   (reshards {c_plan * 1e3:.3f} + vocab-parallel CE {c_int * 1e3:.3f})")
    print()
    print(f"bytes sent by reshards {traffic.traffic.planned_bytes} (plans, scaled to float64: "
          f"{sum(traffic.traffic.predicted(prog).values())}); ops' own reductions "
          f"{traffic.traffic.internal_bytes}")
    verdict = "matches" if err <= 1e-12 else "DOES NOT match"
    print(f"result {verdict} serial numpy: max relative error {err:.1e} ({worst or '-'})")
    g_verdict = "match" if g_err <= 1e-12 else "DO NOT match"
    print(f"gradients {g_verdict} the simulated executor's: max relative error {g_err:.1e} "
          f"({g_worst or '-'})")
    print()
    print(calibrate.report(results).split("\n\n", 1)[1])
    return 0


if __name__ == "__main__":
    if "--conv" in sys.argv and "PMI_RANK" not in os.environ:
        sys.exit("run with: mpiexec -n 2 .venv/bin/python bench/e2e.py --conv")
    if "SPMDRULES_UNDER_MPI" not in os.environ and "PMI_RANK" not in os.environ:
        sys.exit(calibrate.relaunch(Path(__file__)))
    sys.exit(main())
