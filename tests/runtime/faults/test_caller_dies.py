"""The process that called run_mpi is interrupted or killed (issue 23): its job must not outlive
it. A caller process starts a 4-rank job whose ranks sleep in their first step; once every rank
is there, the test sends the caller SIGINT (Ctrl-C: the launcher ends the job itself before the
KeyboardInterrupt goes on), SIGTERM or SIGKILL (the job's guard ends it). Within a bounded time,
no process of the job may be alive (mpiexec, its proxy, the ranks, the guard), and the shared
memory files the job held and its folders must be gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from spmdrules.runtime.processes import alive, descendants, kill, rank_of, shm_files

pytestmark = pytest.mark.mpi

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
CALLER = HERE / "long_caller.py"
#: seconds for the caller to import, lower its program and bring every rank to its first step
#: (generous: an oversubscribed, loaded machine)
START_SECONDS = 240.0
#: seconds for the job to end once its caller is signalled
END_SECONDS = 60.0


def _until(what: str, cond: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, f"not within {seconds:g} s: {what}"
        time.sleep(0.1)


def _environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        items = f.read().decode(errors="replace").split("\0")
    return dict(item.split("=", 1) for item in items if "=" in item)


def _job_folders(rank_pid: int) -> list[Path]:
    """The launcher's folder (markers, places) and run_mpi's (program, feeds) of a rank."""
    with open(f"/proc/{rank_pid}/cmdline", "rb") as f:
        argv = f.read().decode().split("\0")
    return [Path(_environ(rank_pid)["SPMDRULES_DONE_DIR"]),
            Path(argv[argv.index("spmdrules.execution.mpi_worker") + 1])]


@pytest.mark.timeout(START_SECONDS + 2 * END_SECONDS + 60)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL],
                         ids=["SIGINT", "SIGTERM", "SIGKILL"])
def test_the_job_ends_with_its_caller(sig: signal.Signals, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests/support")])}
    caller = subprocess.Popen([sys.executable, str(CALLER), str(tmp_path)], env=env, cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              start_new_session=True)
    job: dict[int, int] = {}
    segments: set[str] = set()
    try:
        ranks: dict[int, int] = {}

        def ranks_in_their_step() -> bool:
            assert caller.poll() is None, caller.communicate()[1].decode()[-3000:]
            ranks.clear()
            ranks.update({p: r for p in descendants(caller.pid)
                          if p != caller.pid and (r := rank_of(p)) is not None})
            return sorted(ranks.values()) == [0, 1, 2, 3] and all(
                (tmp_path / f"sleeping.{r}").exists() for r in range(4))

        _until("every rank of the job in its first step", ranks_in_their_step, START_SECONDS)
        job = {p: s for p, s in descendants(caller.pid).items() if p != caller.pid}
        for p in job:
            segments |= shm_files(p)
        folders = _job_folders(next(iter(ranks)))
        assert segments, "the job's processes hold no shared memory: nothing to check"
        assert len(job) >= 4 + 2, f"the ranks, mpiexec and its proxy: {job}"

        os.kill(caller.pid, sig)
        caller.wait(END_SECONDS)
        _until("the job's processes gone",
               lambda: not [p for p, s in job.items() if alive(p, s)], END_SECONDS)
        _until("the job's shared memory and folders removed",
               lambda: not [f for f in [*segments, *folders] if Path(f).exists()], END_SECONDS)
        if sig == signal.SIGINT:  # the caller saw the interruption
            assert b"KeyboardInterrupt" in caller.communicate()[1]
    finally:  # never leave a job behind, whatever failed
        kill(job, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            caller.kill()
        caller.wait()
        for path in segments:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
