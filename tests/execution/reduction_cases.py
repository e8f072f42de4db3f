"""``mpiexec -n 4 python reduction_cases.py``: every case of ``reduction_matrix`` on the MPI
executor in one job. Rank 0 gathers every rank's blocks and prints ``FAIL <line>`` per process
copy unlike serial numpy or unlike its replicas, then ``CHECKED <cases> <copies>``."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
import reduction_matrix as rm

from spmdrules.completion import complete
from spmdrules.execution.executor import run_serial
from spmdrules.execution.lowering import lower
from spmdrules.execution.mpi import MPIExecutor

comm = MPI.COMM_WORLD
warnings.simplefilter("ignore", RuntimeWarning)  # the kernels' own NaN and overflow warnings
g, feeds, todo = rm.build()
program = lower(complete(g))
blocks, _ = MPIExecutor(program, comm).run(feeds, timeout=100)
every = comm.gather(blocks, root=0)
if comm.Get_rank() == 0:
    assert every is not None
    failures = rm.check(program, todo, run_serial(g, feeds), dict(enumerate(every)))
    for line in failures:
        print("FAIL", line)
    copies = sum(len(program.buffers[b].mesh.process_ids)
                 for _, b in rm.reduced_buffers(program, todo).values())
    print("CHECKED", len(todo), copies, flush=True)


def integer_averages() -> None:
    """An average of integers whose sum does not fit their dtype, straight through the MPI ops
    (no program makes one: the kernels average integers in float64). Imported here, after the
    matrix, which needs nothing but the executor."""
    from spmdrules.runtime import reduce_ops

    hundreds = np.full(8, 100, dtype=np.int8)
    averages = [reduce_ops.allreduce(comm, hundreds, "avg"),
                reduce_ops.reduce_scatter(comm, hundreds, [2] * comm.Get_size(), "avg")]
    if any(a.dtype != np.int8 or (a != 100).any() for a in averages):
        print("FAIL int8 avg on rank", comm.Get_rank(), averages, flush=True)


integer_averages()
