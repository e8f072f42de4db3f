"""Calibrate the alpha-beta cost model (spmdrules/completion/cost.py) from this machine's MPI timings.

    python bench/calibrate.py [--repeats 3] [--write [PATH]]   (relaunches under mpiexec -n 4)

On a 2x2 mesh (dp, mp) it times, per mesh dim, a ping-pong between the two members of each
group and an Allreduce inside each group, over message sizes from 8 B to 2 MB, and fits
``t = alpha * rounds + beta * bytes`` by least squares (ping-pong: one round per one-way trip;
allreduce: 2(n-1) rounds and 2(n-1)/n of the buffer, the ring model the planner charges). Each
size is timed ``--repeats`` times and the median kept. It prints the measurements and the fits
per mesh dim, and the calibration it recommends: the all-reduce fit over both mesh dims for the
collectives (one machine's processes share memory, so the mesh dims differ only by noise) and
the ping-pong fit for transfers between meshes. ``--write`` stores that calibration as JSON
(default: spmdrules/completion/calibration.json, which
``spmdrules.completion.cost.DEFAULT_COST_MODEL`` loads). Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

SIZES = [8 << k for k in range(0, 20, 2)]  # 8 B .. 2 MB
TRIALS = 5
MESH_SHAPE = (2, 2)
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "spmdrules" / "completion" / "calibration.json"
DIM_NAMES = ("dp", "mp")


def _repeat(nbytes: int) -> int:
    return max(5, min(200, (1 << 22) // max(nbytes, 1)))


def group_comm(comm: Any, m: int) -> Any:
    """This rank's group along mesh dim ``m`` of a row-major MESH_SHAPE mesh."""
    coord = np.unravel_index(comm.Get_rank(), MESH_SHAPE)
    rest = [int(c) for d, c in enumerate(coord) if d != m]
    color = int(np.ravel_multi_index(rest, [s for d, s in enumerate(MESH_SHAPE) if d != m]))
    return comm.Split(color, int(coord[m]))


def time_pingpong(g: Any, nbytes: int) -> float:
    """Seconds per one-way message between members 0 and 1 of group ``g``."""
    buf = np.zeros(max(nbytes // 8, 1))
    reps = _repeat(nbytes)
    g.Barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        if g.Get_rank() == 0:
            g.Send(buf, 1, 7)
            g.Recv(buf, 1, 7)
        else:
            g.Recv(buf, 0, 7)
            g.Send(buf, 0, 7)
    return (time.perf_counter() - t0) / (2 * reps)


def time_allreduce(g: Any, nbytes: int) -> float:
    buf = np.ones(max(nbytes // 8, 1))
    out = np.empty_like(buf)
    reps = _repeat(nbytes)
    g.Barrier()
    t0 = time.perf_counter()
    for _ in range(reps):
        g.Allreduce(buf, out)
    return (time.perf_counter() - t0) / reps


def fit(rounds: list[float], nbytes: list[float], seconds: list[float]) -> tuple[float, float]:
    """Least-squares (alpha, beta) >= 0 for ``seconds = alpha * rounds + beta * nbytes``, in
    relative error (each row divided by its time), so small messages fix alpha and large ones
    beta instead of the largest times deciding both."""
    t = np.array(seconds, dtype=np.float64)
    a = np.array([rounds, nbytes], dtype=np.float64).T / t[:, None]
    sol, *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    return max(float(sol[0]), 0.0), max(float(sol[1]), 0.0)


def _rows(n: int, kind: str) -> tuple[list[float], list[float]]:
    """(rounds, bytes per process) of each size under the model the planner charges."""
    if kind == "pingpong":
        return [1.0] * len(SIZES), [float(b) for b in SIZES]
    return [2.0 * (n - 1)] * len(SIZES), [2 * (n - 1) / n * b for b in SIZES]


def measure(comm: Any, repeats: int = 3) -> dict[str, dict[str, Any]]:
    """Per mesh dim: timings (median over ``repeats``) and the (alpha, beta) fits. Every rank
    calls it; the slowest rank's time counts (a collective is as slow as its slowest member)."""
    from mpi4py import MPI

    out: dict[str, dict[str, Any]] = {}
    for m, name in enumerate(DIM_NAMES):
        g = group_comm(comm, m)
        n = g.Get_size()

        def timed(fn: Any, b: int, g: Any = g) -> float:
            # best of TRIALS per rank (oversubscribed ranks get descheduled), slowest rank
            # overall, median over the repeats
            return statistics.median(
                comm.allreduce(min(fn(g, b) for _ in range(TRIALS)), op=MPI.MAX)
                for _ in range(repeats))

        pp = [timed(time_pingpong, b) for b in SIZES]
        ar = [timed(time_allreduce, b) for b in SIZES]
        g.Free()
        out[name] = {"n": n, "pingpong": pp, "allreduce": ar,
                     "fit_pingpong": fit(*_rows(n, "pingpong"), pp),
                     "fit_allreduce": fit(*_rows(n, "allreduce"), ar)}
    return out


def pooled_fit(results: dict[str, dict[str, Any]], kind: str) -> tuple[float, float]:
    """One (alpha, beta) for ``kind`` over the timings of every mesh dim."""
    rounds: list[float] = []
    nbytes: list[float] = []
    seconds: list[float] = []
    for r in results.values():
        ro, by = _rows(r["n"], kind)
        rounds += ro
        nbytes += by
        seconds += r[kind]
    return fit(rounds, nbytes, seconds)


def calibration(results: dict[str, dict[str, Any]], mpi_version: str) -> dict[str, Any]:
    """The JSON that spmdrules.completion.cost.load_calibration reads."""
    (ca, cb), (pa, pb) = pooled_fit(results, "allreduce"), pooled_fit(results, "pingpong")
    return {
        "collective": {"alpha": ca, "beta": cb},
        "p2p": {"alpha": pa, "beta": pb},
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
        "mpi": mpi_version,
        "date": datetime.date.today().isoformat(),
        "command": "python bench/calibrate.py --write",
        "per_dim": {d: {"allreduce": r["fit_allreduce"], "pingpong": r["fit_pingpong"]}
                    for d, r in results.items()},
    }


def report(results: dict[str, dict[str, Any]]) -> str:
    lines = ["message bytes  " + "  ".join(f"{d} ping-pong   {d} allreduce" for d in results)]
    for i, b in enumerate(SIZES):
        row = [f"{b:>13}"]
        for r in results.values():
            row.append(f"{r['pingpong'][i] * 1e6:10.1f} us  {r['allreduce'][i] * 1e6:10.1f} us")
        lines.append("  ".join(row))
    lines.append("")
    lines.append("fits (alpha s/round, beta s/byte):")
    for d, r in results.items():
        (pa, pb), (aa, ab) = r["fit_pingpong"], r["fit_allreduce"]
        lines.append(f"  {d}: ping-pong alpha {pa:.2e} beta {pb:.2e} ({1 / pb / 1e9 if pb else 0:.2f}"
                     f" GB/s); allreduce alpha {aa:.2e} beta {ab:.2e} "
                     f"({1 / ab / 1e9 if ab else 0:.2f} GB/s)")
    lines.append("")
    (ca, cb), (pa, pb) = pooled_fit(results, "allreduce"), pooled_fit(results, "pingpong")
    lines.append("recommended (both mesh dims pooled):")
    lines.append(f"  collectives: LinkCost(alpha={ca:.2e}, beta={cb:.2e})"
                 f"  ({1 / cb / 1e9 if cb else 0:.2f} GB/s)")
    lines.append(f"  p2p:         LinkCost(alpha={pa:.2e}, beta={pb:.2e})"
                 f"  ({1 / pb / 1e9 if pb else 0:.2f} GB/s)")
    return "\n".join(lines)


def calibrated_cost_model(results: dict[str, dict[str, Any]]) -> Any:
    """The CostModel of these measurements (what ``--write`` would make the default)."""
    from spmdrules.completion.cost import CostModel, LinkCost

    return CostModel(default=LinkCost(*pooled_fit(results, "allreduce")),
                     p2p=LinkCost(*pooled_fit(results, "pingpong")))


def main() -> int:
    from mpi4py import MPI

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3, help="timings per size (median kept)")
    ap.add_argument("--write", nargs="?", const=str(DEFAULT_OUT), default=None, metavar="PATH",
                    help=f"store the calibration as JSON (default path: {DEFAULT_OUT})")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 4:
        raise SystemExit("run with mpiexec -n 4 (a 2x2 mesh)")
    results = measure(comm, args.repeats)
    if comm.Get_rank() == 0:
        version = " ".join(MPI.Get_library_version().splitlines()[0].split())
        print(f"MPI calibration on a {MESH_SHAPE[0]}x{MESH_SHAPE[1]} mesh {DIM_NAMES}, {version}")
        print(report(results))
        if args.write:
            from spmdrules.core.output import write_text

            write_text(args.write, json.dumps(calibration(results, version), indent=2) + "\n")
            print(f"wrote {args.write}")
    return 0


def relaunch(script: Path, n: int = 4) -> int:
    """Run ``script`` under the venv's mpiexec when started as a plain process."""
    exe = Path(sys.executable).parent / "mpiexec"
    env = {**os.environ, "SPMDRULES_UNDER_MPI": "1", "MPIR_CVAR_POLLS_BEFORE_YIELD": "10",
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           "PYTHONPATH": str(script.resolve().parents[1])}
    return subprocess.call([str(exe), "-n", str(n), sys.executable, str(script), *sys.argv[1:]],
                           env=env, timeout=600)


if __name__ == "__main__":
    if "SPMDRULES_UNDER_MPI" not in os.environ and "PMI_RANK" not in os.environ:
        sys.exit(relaunch(Path(__file__)))
    sys.exit(main())
