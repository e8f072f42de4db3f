"""``python long_caller.py MARKS``: call run_mpi on a 4-rank program whose first step sleeps for
ten minutes on every rank (leaving ``sleeping.<rank>`` in the folder MARKS first), so that the
job is still running when the test signals this process (tests/support must be on PYTHONPATH:
the ranks unpickle the step's function from there)."""

from __future__ import annotations

import dataclasses
import sys

from e2e_models import mlp64
from pipeline_cases import MEGATRON2, MESH2
from slow_steps import Sleep

from spmdrules.completion import complete
from spmdrules.execution.executor import random_feeds
from spmdrules.execution.lowering import lower
from spmdrules.execution.mpi import run_mpi
from spmdrules.execution.program import LocalStep

prog = lower(complete(mlp64(MESH2, MEGATRON2, batch=4)))
x = prog.feeds[0]
sleep = LocalStep("sleep", prog.buffers[x].mesh, Sleep(600.0, sys.argv[1]), (x,), (x,))
prog = dataclasses.replace(prog, instructions=[sleep, *prog.instructions])
run_mpi(prog, random_feeds(prog, seed=3), nprocs=4, timeout=900.0)
