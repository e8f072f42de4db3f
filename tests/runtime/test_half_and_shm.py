"""float16 and bfloat16 through the MPI runtime, and the fallback to plain messages when
/dev/shm has no room for a shared-memory window, under ``mpiexec -n 4``."""

from __future__ import annotations

from pathlib import Path

import mpirun
import pytest

pytestmark = pytest.mark.mpi

HERE = Path(__file__).resolve().parent
N = 4


@pytest.mark.timeout(150)
def test_half_precision_and_shm_fallback() -> None:
    pytest.importorskip("ml_dtypes")
    res = mpirun.mpirun(N, [str(HERE / "half_and_shm_cases.py")], timeout=120)
    detail = f"{res.job.describe()}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    assert res.returncode == 0 and not res.timed_out, detail
    passed = {tuple(line.split()[1:]) for line in res.stdout.splitlines()
              if line.startswith("PASS ")}
    for case in ("repartition_moves_half", "sums_accumulate_in_float32",
                 "shm_fallback_repartition", "shm_fallback_sum_reduce"):
        assert {(case, str(r)) for r in range(N)} <= passed, f"{case} failed\n{detail}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_mpi_executor_runs_half_precision_like_the_simulated_one(dtype: str) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    import numpy as np
    from pipeline_cases import MESH2

    from spmdrules import ops
    from spmdrules.completion import complete
    from spmdrules.execution.executor import random_feeds
    from spmdrules.execution.lowering import lower
    from spmdrules.execution.mpi import run_mpi
    from spmdrules.execution.simulated import run_simulated
    from spmdrules.graph.annotate import shard
    from spmdrules.graph.graph import Graph

    with Graph("half") as g:
        x = g.input("x", [4, 6, 8], dtype)
        w1 = g.param("fc1.weight", [8, 16], dtype)
        w2 = g.param("fc2.weight", [16, 8], dtype)
        ops.matmul(ops.gelu(ops.matmul(x, w1, name="fc1"), name="gelu"), w2, name="out")
    specs = {"x": ("dp", None, None), "fc1.weight": (None, "mp"), "fc2.weight": ("mp", None)}
    for name, spec in specs.items():
        shard(g.tensor(name), MESH2, spec)
    prog = lower(complete(g))
    npdt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    feeds = {k: v.astype(npdt) for k, v in random_feeds(prog, seed=1).items()}
    run = run_mpi(prog, feeds, nprocs=4, fetch=["out"], timeout=240)
    sim = run_simulated(prog, feeds).fetch("out")
    assert run.values["out"].dtype == sim.dtype
    assert np.array_equal(run.values["out"], sim)
