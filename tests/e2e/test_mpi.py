"""The MPI executor under real ``mpiexec`` (hard timeouts): serial results and the plans' bytes.

Each case is one mpiexec job; together they exercise every MPI path: AllSumReduce, Allreduce with
max, Reduce_scatter, the box exchange for all-gathers and all-to-alls, local slices, and the
vocab-parallel cross entropy's own reductions.
"""

from __future__ import annotations

import pytest
from pipeline_cases import CASES, LIMITS

from spmdrules.completion import complete
from spmdrules.execution.executor import max_error, random_feeds, run_serial
from spmdrules.execution.lowering import lower
from spmdrules.execution.mpi import run_mpi
from spmdrules.execution.simulated import run_simulated

pytestmark = pytest.mark.mpi


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("case", "nprocs"), [("2d-gpt", 4), ("2d-llama", 4),
                                               ("2d-reduce-scatter", 4),
                                               ("2d-partial-max-input", 4),
                                               ("3d-mixed-coshard", 8)])
def test_mpi_run_equals_serial_and_the_simulated_bytes(case: str, nprocs: int) -> None:
    g = CASES[case]()
    prog = lower(complete(g))
    feeds = random_feeds(prog, seed=3, vocab_limits=LIMITS)
    run = run_mpi(prog, feeds, nprocs=nprocs, timeout=90)
    err, worst = max_error(run.values, run_serial(g, feeds))
    assert err <= 1e-12, f"{case}: {worst} differs by {err}"
    assert run.traffic.mismatches(prog) == []
    sim = run_simulated(prog, feeds)
    assert run.traffic.per_edge == sim.traffic.per_edge
    assert run.traffic.internal == sim.traffic.internal
    assert run.seconds["run"] > 0 and run.wall > run.seconds["run"]


def test_a_failing_rank_ends_the_job_with_its_error() -> None:
    prog = lower(complete(CASES["2d-megatron"]()))
    feeds = random_feeds(prog, seed=3)
    from spmdrules.execution.executor import ExecutionError

    with pytest.raises(ExecutionError, match="uses process ids up to 3"):
        run_mpi(prog, feeds, nprocs=2, timeout=60)
