"""Launch ``mpiexec -n N`` jobs that end cleanly: bounded time, every rank accounted for, and no
shared memory left behind.

Every job spmdrules starts (:func:`spmdrules.execution.mpi.run_mpi`, the demo, the test launcher)
goes through :func:`launch`, which adds three guarantees to a plain ``subprocess`` call:

- **Bounded time.** After ``timeout`` seconds the job is interrupted and then every process of it
  is killed: ``mpiexec``, its proxy and the ranks (the ranks run in sessions of their own, so
  killing ``mpiexec``'s process group alone would leave them behind).
- **Completion markers.** Each rank that reaches the end of its work calls :func:`mark_done`,
  which creates ``done.<rank>`` in the job's marker directory. MPICH reports success when every
  rank exits with status 0, also when one of them left early (``os._exit(0)`` in the middle of
  the run) and the others then had nothing to wait for; the launcher reports such a job as
  failed, naming the ranks without a marker.
- **The rank that died is named.** ``mpiexec`` runs with ``-disable-auto-cleanup``, so a rank
  that ends without its marker (killed, ``os._exit``, a crash in C) does not take the others
  down with it at once: the watcher sees it end (through a pidfd, the moment it happens), names
  it, gives the others ``DEATH_GRACE_SECONDS`` to report their own errors, and then kills the
  job. ``MPI_Abort`` (a rank that raised, see :mod:`spmdrules.runtime.abort`) still ends every
  rank at once.
- **No leftovers.** While the job runs, a watcher thread walks the job's process tree every
  ``POLL_SECONDS`` and records every file under ``/dev/shm`` that those processes have mapped
  or open (MPICH's ``mpich_shm_*`` segments: its intranode queues and the shared-memory windows).
  When the job ends, normally, by an abort or by the timeout, the recorded files that still exist
  are removed. Only files the job's own processes had open are touched, so concurrent jobs'
  segments are safe. Names are never guessed.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from spmdrules.runtime.abort import JOB_DIR_ENV

# the first line of spmdrules.runtime.abort.failure_report
_FAILED_LINE = re.compile(r"^spmdrules: rank (\d+) of \d+ failed(.*)$", re.M)

#: environment variable naming the directory where ranks leave their completion markers
DONE_DIR_ENV: Final = JOB_DIR_ENV
#: how often the watcher walks the job's processes for shared-memory files
POLL_SECONDS: Final = 0.05
#: where MPICH (and POSIX shm_open) puts shared-memory segments
SHM_DIR: Final = Path("/dev/shm")
#: seconds between interrupting a timed-out job and killing what is left of it
GRACE_SECONDS: Final = 2.0
#: seconds the other ranks get, after one ended without finishing, before the job is killed
DEATH_GRACE_SECONDS: Final = 1.0


@dataclass(slots=True)
class JobResult:
    """What a launched job did."""

    #: mpiexec's exit status (negative: killed by that signal)
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    #: wall time from start to the end of the cleanup
    wall: float
    nprocs: int
    #: ranks that called :func:`mark_done`
    completed: frozenset[int]
    #: shared-memory files the job's processes had open that were still there at the end (removed)
    removed_segments: tuple[str, ...] = ()
    #: every shared-memory file the job's processes were seen holding
    seen_segments: tuple[str, ...] = field(default=())
    #: ranks whose process ended without their completion marker, with when (seconds from the
    #: start), in the order they ended; the first is the one that failed
    died: tuple[tuple[int, float], ...] = ()

    @property
    def incomplete(self) -> tuple[int, ...]:
        """Ranks that never reached their completion marker."""
        return tuple(r for r in range(self.nprocs) if r not in self.completed)

    @property
    def reported(self) -> dict[int, str]:
        """Ranks that reported their own failure before aborting the job
        (:func:`spmdrules.runtime.abort.fail`), with their error line."""
        found: dict[int, str] = {}
        for m in _FAILED_LINE.finditer(self.stderr):
            found.setdefault(int(m.group(1)), m.group(2))
        return found

    @property
    def ok(self) -> bool:
        """The job exited with status 0 and every rank completed."""
        return self.returncode == 0 and not self.timed_out and not self.incomplete

    def describe(self) -> str:
        """One line saying how the job ended."""
        if self.timed_out:
            return f"mpiexec -n {self.nprocs} timed out after {self.wall:.1f} s (killed)"
        first = ""
        if self.reported:
            first = "; " + "; ".join(f"rank {r} failed{line}" for r, line in self.reported.items())
        elif self.died:
            rank, when = self.died[0]
            first = (f"; rank {rank} ended first without finishing its work, {when:.2f} s "
                     "after the start")
        if self.returncode != 0:
            return f"mpiexec -n {self.nprocs} failed (exit {self.returncode}){first}"
        if self.incomplete:
            return (f"mpiexec -n {self.nprocs} exited with status 0, but ranks "
                    f"{list(self.incomplete)} never reached the end of their work (a rank that "
                    f"exits early must not make the job look successful){first}")
        return f"mpiexec -n {self.nprocs} completed"


def mark_done() -> None:
    """Record that this rank finished its work (no-op outside a :func:`launch` job).

    Call it last, after the rank's final collective: a rank that calls it has nothing left that
    another rank could wait for."""
    done = os.environ.get(DONE_DIR_ENV)
    rank = os.environ.get("PMI_RANK")
    if done and rank is not None:
        Path(done, f"done.{int(rank)}").touch()


# -- the job's processes -------------------------------------------------------------------
def _stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: the fields follow the last ')'
    return stat[stat.rindex(b")") + 2 :].split()


def _parents() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start time) of every process visible in /proc."""
    out: dict[int, tuple[int, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields is not None:
            out[int(entry.name)] = (int(fields[1]), int(fields[19]))
    return out


def descendants(pid: int, table: Mapping[int, tuple[int, int]] | None = None) -> dict[int, int]:
    """``pid`` and every process below it, each with its start time (to tell a reused pid);
    ``table``: a snapshot of ``_parents()`` to read instead of a new one."""
    if table is None:
        table = _parents()
    children: dict[int, list[int]] = {}
    for p, (pp, _) in table.items():
        children.setdefault(pp, []).append(p)
    found = {pid: table.get(pid, (0, -1))[1]}
    todo = [pid]
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in found:
                found[c] = table[c][1]
                todo.append(c)
    return found


def shm_files(pid: int) -> set[str]:
    """Files under /dev/shm that process ``pid`` has mapped or open (unlinked ones excluded)."""
    prefix = str(SHM_DIR) + "/"
    out: set[str] = set()
    with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as f:
        for line in f:
            i = line.find(prefix)
            if i >= 0 and not line.rstrip().endswith("(deleted)"):
                out.add(line[i:].rstrip())
    with contextlib.suppress(OSError):
        for fd in os.scandir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(fd.path)
                if target.startswith(prefix) and not target.endswith("(deleted)"):
                    out.add(target)
    return out


def _rank_of(pid: int) -> int | None:
    """The MPI rank of process ``pid`` (hydra sets PMI_RANK in each rank's environment)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"PMI_RANK="):
            return int(item[9:])
    return None


class _Watcher(threading.Thread):
    """Records the job's processes, their ranks, when each rank ends, and the shared-memory
    files they hold, until stopped.

    The end of each rank is seen through a pidfd (Linux 5.3+) the moment it happens, so the
    rank that ended first (the one that died, before mpiexec killed the others) can be named.
    """

    def __init__(self, pid: int, t0: float, done: str) -> None:
        super().__init__(daemon=True, name=f"spmdrules-job-watch-{pid}")
        self.pid, self.t0, self.done = pid, t0, done
        self.died: list[tuple[int, float]] = []
        self._kill_at: float | None = None
        self.pids: dict[int, int] = {}  # pid -> start time
        self.ranks: dict[int, int] = {}  # pid -> rank
        self.ended: dict[int, float] = {}  # rank -> seconds from the start when it ended
        self.segments: set[str] = set()
        self._fds: dict[int, int] = {}  # pidfd -> pid
        self._poll = select.poll()
        self._lock = threading.Lock()
        self._stop_event = threading.Event()

    def scan(self) -> None:
        with self._lock:
            table = _parents()
            tree = descendants(self.pid, table)
            for p, start in tree.items():
                if p in self.ranks or p == self.pid:
                    continue
                self.pids[p] = start
                # a rank's environment names it only once hydra's fork has exec'd the rank,
                # so a process is asked again at every scan until it answers. A process a rank
                # started (a compiler, ldconfig) inherits the rank's environment: it is not a
                # rank, and its end is no rank's death
                rank = _rank_of(p)
                parent = table.get(p, (0, 0))[0]
                if rank is not None and (parent in self.ranks or _rank_of(parent) is not None):
                    continue
                if rank is not None:
                    self.ranks[p] = rank
                    with contextlib.suppress(OSError, AttributeError):
                        fd = os.pidfd_open(p)
                        self._fds[fd] = p
                        self._poll.register(fd, select.POLLIN)
            for p in tree:
                self.segments |= shm_files(p)

    def _reap(self, timeout_ms: int) -> None:
        events = self._poll.poll(timeout_ms) if self._fds else []
        now = time.perf_counter() - self.t0
        for fd, _ in events:
            p = self._fds.pop(fd)
            self._poll.unregister(fd)
            os.close(fd)
            rank = self.ranks[p]
            self.ended.setdefault(rank, now)
            if not os.path.exists(os.path.join(self.done, f"done.{rank}")):
                self.died.append((rank, now))
                if self._kill_at is None:
                    self._kill_at = time.perf_counter() + DEATH_GRACE_SECONDS

    def run(self) -> None:
        next_scan = 0.0
        while not self._stop_event.is_set():
            if time.perf_counter() >= next_scan:
                self.scan()
                next_scan = time.perf_counter() + POLL_SECONDS
            if self._fds:
                self._reap(int(POLL_SECONDS * 1000))
            else:
                self._stop_event.wait(POLL_SECONDS)
            if self._kill_at is not None and time.perf_counter() >= self._kill_at:
                # a rank died: the others may wait for it forever
                self.scan()
                with self._lock:
                    _kill({p: s for p, s in self.pids.items() if p in self.ranks}, signal.SIGKILL)
                self._kill_at = None

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        self._reap(0)
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()



def _alive(pid: int, start: int) -> bool:
    """The process recorded as (pid, start) still runs (not a zombie, not a reused pid)."""
    fields = _stat(pid)
    return fields is not None and fields[0] != b"Z" and int(fields[19]) == start


def _kill(pids: Mapping[int, int], sig: int) -> None:
    for p, start in pids.items():
        if _alive(p, start):
            with contextlib.suppress(OSError):
                os.kill(p, sig)


def launch(nprocs: int, argv: Sequence[str], *, timeout: float, mpiexec: str | Path,
           env: Mapping[str, str] | None = None, cwd: str | Path | None = None) -> JobResult:
    """Run ``mpiexec -n nprocs argv...`` with the guarantees of this module's docstring."""
    with tempfile.TemporaryDirectory(prefix="spmdrules-done-") as done:
        full_env = {**(os.environ if env is None else env), DONE_DIR_ENV: done}
        cmd = [str(mpiexec), "-disable-auto-cleanup", "-n", str(nprocs), *argv]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        watcher = _Watcher(proc.pid, t0, done)
        watcher.start()
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            watcher.scan()
            # ask hydra to tear the job down, then kill whatever is left (ranks live in sessions
            # of their own, so the process group of mpiexec is not enough)
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGINT)
            deadline = time.perf_counter() + GRACE_SECONDS
            while time.perf_counter() < deadline and any(
                    _alive(p, s) for p, s in list(watcher.pids.items())):
                time.sleep(POLL_SECONDS)
            watcher.scan()
            _kill(dict(watcher.pids), signal.SIGKILL)
            out, err = proc.communicate()
        finally:
            watcher.stop()
        # Ranks may outlive mpiexec by a moment (hydra kills them asynchronously).
        deadline = time.perf_counter() + GRACE_SECONDS
        ranks = {p: s for p, s in watcher.pids.items() if p != proc.pid}
        while time.perf_counter() < deadline and any(_alive(p, s) for p, s in ranks.items()):
            time.sleep(POLL_SECONDS)
        _kill(ranks, signal.SIGKILL)
        removed = []
        for path in sorted(watcher.segments):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                removed.append(path)
        names = sorted(os.listdir(done))
        completed = frozenset(int(n.split(".")[1]) for n in names if n.startswith("done."))
        # a failing rank's own report (abort.fail), which its stderr may not have delivered
        for n in names:
            if n.startswith("failed."):
                report = Path(done, n).read_text()
                if report not in err:
                    err += report
        wall = time.perf_counter() - t0
    return JobResult(-9 if timed_out else proc.returncode, out, err, timed_out, wall, nprocs,
                     completed, tuple(removed), tuple(sorted(watcher.segments)),
                     tuple(watcher.died))


def mpiexec_path() -> Path | None:
    """The venv's ``mpiexec`` (next to this interpreter), else one on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists():
        return here
    found = shutil.which("mpiexec")
    return Path(found) if found else None


__all__ = [
    "DONE_DIR_ENV",
    "JobResult",
    "descendants",
    "launch",
    "mark_done",
    "mpiexec_path",
    "shm_files",
]
