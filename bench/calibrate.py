"""Calibrate the alpha-beta cost model (spmdrules/cost.py) from this machine's MPI timings.

    mpiexec -n 4 .venv/bin/python bench/calibrate.py      (or plain python: it relaunches)

On a 2x2 mesh (dp, mp) it times, per mesh dim, a ping-pong between the two members of each
group and an Allreduce inside each group, over message sizes from 8 B to 4 MB, and fits
``t = alpha * rounds + beta * bytes`` by least squares (ping-pong: one round per one-way trip;
allreduce: 2(n-1) rounds and 2(n-1)/n of the buffer, the ring model the planner charges). It
prints the measurements, the fits, and the ``CostModel`` it recommends; cost.py is not edited.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

SIZES = [8 << k for k in range(0, 20, 2)]  # 8 B .. 2 MB
TRIALS = 5
MESH_SHAPE = (2, 2)
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


def measure(comm: Any) -> dict[str, dict[str, Any]]:
    """Per mesh dim: raw timings and the (alpha, beta) fits. Every rank calls it; the slowest
    rank's time counts (a collective is as slow as its slowest member)."""
    from mpi4py import MPI

    out: dict[str, dict[str, Any]] = {}
    for m, name in enumerate(DIM_NAMES):
        g = group_comm(comm, m)
        n = g.Get_size()
        # best of TRIALS per rank (oversubscribed ranks get descheduled), slowest rank overall
        pp = [comm.allreduce(min(time_pingpong(g, b) for _ in range(TRIALS)), op=MPI.MAX)
              for b in SIZES]
        ar = [comm.allreduce(min(time_allreduce(g, b) for _ in range(TRIALS)), op=MPI.MAX)
              for b in SIZES]
        g.Free()
        ping = fit([1.0] * len(SIZES), [float(b) for b in SIZES], pp)
        allr = fit([2.0 * (n - 1)] * len(SIZES), [2 * (n - 1) / n * b for b in SIZES], ar)
        out[name] = {"pingpong": pp, "allreduce": ar, "fit_pingpong": ping, "fit_allreduce": allr}
    return out


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
    lines.append("recommended (allreduce fit: the planner's steps are collectives):")
    per_dim = ", ".join(f'"{d}": LinkCost({r["fit_allreduce"][0]:.2e}, {r["fit_allreduce"][1]:.2e})'
                        for d, r in results.items())
    lines.append(f"  CostModel(per_dim={{{per_dim}}})")
    return "\n".join(lines)


def calibrated_cost_model(results: dict[str, dict[str, Any]]) -> Any:
    from spmdrules.cost import CostModel, LinkCost

    links = {d: LinkCost(*r["fit_allreduce"]) for d, r in results.items()}
    worst = max(links.values(), key=lambda lk: lk.beta)
    return CostModel(default=worst, per_dim=links, p2p=worst)


def main() -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_size() != 4:
        raise SystemExit("run with mpiexec -n 4 (a 2x2 mesh)")
    results = measure(comm)
    if comm.Get_rank() == 0:
        print(f"MPI calibration on a {MESH_SHAPE[0]}x{MESH_SHAPE[1]} mesh {DIM_NAMES}, "
              f"{MPI.Get_library_version().splitlines()[0]}")
        print(report(results))
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
