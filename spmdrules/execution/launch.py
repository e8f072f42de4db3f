"""Launch ``mpiexec -n N`` jobs that end cleanly: bounded time, every rank accounted for, and no
shared memory left behind.

Every job spmdrules starts (:func:`spmdrules.execution.mpi_run.run_mpi`, the demo, the test
launcher) goes through :func:`launch`, which adds these guarantees to a plain ``subprocess``
call:

- **Bounded time.** After ``timeout`` seconds the job is interrupted and then every process of it
  is killed: ``mpiexec``, its proxy and the ranks (the ranks run in sessions of their own, so
  killing ``mpiexec``'s process group alone would leave them behind). Before that, the launcher
  reads where each rank is (:mod:`spmdrules.runtime.progress`: every rank records its place in
  the job's folder) and which ranks are stopped or ended, and names the rank that holds the
  others up, with its place.
- **Completion markers.** Each rank that reaches the end of its work calls :func:`mark_done`,
  which creates ``done.<rank>`` in the job's marker directory. MPICH reports success when every
  rank exits with status 0, also when one of them left early (``os._exit(0)`` in the middle of
  the run) and the others then had nothing to wait for; the launcher reports such a job as
  failed, naming the ranks without a marker.
- **The rank that died is named.** ``mpiexec`` runs with ``-disable-auto-cleanup``, so a rank
  that ends without its marker (killed, ``os._exit``, a crash in C) does not take the others
  down with it at once: the watcher sees it end (through a pidfd, the moment it happens), names
  it and its last place, gives the others ``DEATH_GRACE_SECONDS`` to report their own errors,
  and then kills the job. ``MPI_Abort`` (a rank that raised, see
  :mod:`spmdrules.runtime.abort`, or a rank's watchdog) still ends every rank at once.
- **No leftovers.** While the job runs, a watcher thread walks the job's process tree every
  ``POLL_SECONDS`` and records every file under ``/dev/shm`` that those processes have mapped
  or open (MPICH's ``mpich_shm_*`` segments: its intranode queues and the shared-memory windows).
  When the job ends, normally, by an abort or by the timeout, the recorded files that still exist
  are removed. Only files the job's own processes had open are touched, so concurrent jobs'
  segments are safe. Names are never guessed.
- **Nothing outlives the caller.** An interrupted caller (Ctrl-C: ``KeyboardInterrupt``) ends
  the job and removes its files before the exception goes on. A caller killed outright
  (SIGKILL, SIGTERM) cannot, so every job has a guard, a small process of its own session that
  the watcher keeps told of the job's processes and files: when the caller dies before the job
  ends, the guard kills the job and removes its files and folders
  (:mod:`spmdrules.runtime.processes`).
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
from typing import IO, Final

from spmdrules.runtime.processes import (
    ENDED,
    SHM_DIR,
    alive,
    descendants,
    guard_argv,
    kill,
    parents,
    rank_of,
    remove_files,
    shm_files,
    start_time,
    state,
)
from spmdrules.runtime.progress import JOB_DIR_ENV, diagnose, read_places

# the first line of spmdrules.runtime.abort.failure_report
_FAILED_LINE = re.compile(r"^spmdrules: rank (\d+) of \d+ failed(.*)$", re.M)
# a rank's watchdog's report (spmdrules.execution.mpi_faults.Watchdog)
_STALL_LINE = re.compile(r"^spmdrules: stall: (.*)$", re.M)
_STUCK = re.compile(r"^rank (\d+) of \d+ is stuck at (.*)$")

#: environment variable naming the directory where ranks leave their completion markers
DONE_DIR_ENV: Final = JOB_DIR_ENV
#: how often the watcher walks the job's processes for shared-memory files
POLL_SECONDS: Final = 0.05
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
    #: each rank's last recorded place (:mod:`spmdrules.runtime.progress`)
    places: Mapping[int, str] = field(default_factory=dict)
    #: the launcher's own report, at its timeout, of the ranks that held the job up
    diagnosis: tuple[str, ...] = ()

    @property
    def first_died(self) -> tuple[int, ...]:
        """The ranks that ended first without finishing: one, or several whose ends the launcher
        saw in the same instant (a loaded machine may not run its watcher in between)."""
        return tuple(r for r, when in self.died if when == self.died[0][1])

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
    def stall(self) -> tuple[str, ...]:
        """The report of a stuck job: the launcher's own at its timeout, else the one a rank's
        watchdog printed before aborting the job."""
        return self.diagnosis or tuple(dict.fromkeys(_STALL_LINE.findall(self.stderr)))

    @property
    def stuck(self) -> dict[int, str]:
        """The ranks the stall report names as holding the job up, with their place."""
        found = (_STUCK.match(line) for line in self.stall)
        return {int(m.group(1)): m.group(2) for m in found if m}

    @property
    def ok(self) -> bool:
        """The job exited with status 0 and every rank completed."""
        return self.returncode == 0 and not self.timed_out and not self.incomplete

    def describe(self) -> str:
        """One line saying how the job ended."""
        if self.timed_out:
            return (f"mpiexec -n {self.nprocs} timed out after {self.wall:.1f} s (killed)"
                    + "".join(f"; {line}" for line in self.stall))
        first = ""
        if self.reported:
            first = "; " + "; ".join(f"rank {r} failed{line}" for r, line in self.reported.items())
        elif self.stall:
            first = "; " + "; ".join(self.stall)
        elif len(self.first_died) > 1:
            when = self.died[0][1]
            at = ", ".join(f"rank {r}" + (f" at {self.places[r]}" if r in self.places else "")
                           for r in self.first_died)
            first = (f"; ranks {list(self.first_died)} ended without finishing their work, seen "
                     f"together {when:.2f} s after the start (which of them ended first cannot "
                     f"be told): {at}")
        elif self.died:
            rank, when = self.died[0]
            place = f" at {self.places[rank]}," if rank in self.places else ""
            first = (f"; rank {rank} ended first without finishing its work,{place} {when:.2f} s "
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


class _Guard:
    """The job's guard process (:mod:`spmdrules.runtime.processes`), kept told of what the job
    owns; :meth:`close` tells it the job ended cleanly, or, with ``clean`` unset (the cleanup
    did not finish), leaves the job to it."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            guard_argv(), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        self._lock = threading.Lock()
        self.clean = False

    def tell(self, *lines: str) -> None:
        pipe: IO[bytes] | None = self.proc.stdin
        with self._lock, contextlib.suppress(OSError, ValueError):
            assert pipe is not None
            pipe.write("".join(f"{line}\n" for line in lines).encode())
            pipe.flush()

    def close(self) -> None:
        if self.clean:
            self.tell("end")
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        if self.clean:
            try:
                self.proc.wait(timeout=GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class _Watcher(threading.Thread):
    """Records the job's processes, their ranks, when each rank ends, and the shared-memory
    files they hold, until stopped; tells the guard of every process and file it finds.

    The end of each rank is seen through a pidfd (Linux 5.3+) the moment it happens, so the
    rank that ended first (the one that died, before mpiexec killed the others) can be named.
    """

    def __init__(self, pid: int, t0: float, done: str, guard: _Guard) -> None:
        super().__init__(daemon=True, name=f"spmdrules-job-watch-{pid}")
        self.pid, self.t0, self.done, self.guard = pid, t0, done, guard
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
            table = parents()
            tree = descendants(self.pid, table)
            news = [f"pid {p} {s}" for p, s in tree.items() if p not in self.pids]
            for p, start in tree.items():
                if p in self.ranks or p == self.pid:
                    continue
                self.pids[p] = start
                # a rank's environment names it only once hydra's fork has exec'd the rank,
                # so a process is asked again at every scan until it answers. A process a rank
                # started (a compiler, ldconfig) inherits the rank's environment: it is not a
                # rank, and its end is no rank's death
                rank = rank_of(p)
                parent = table.get(p, (0, 0))[0]
                if rank is not None and (parent in self.ranks or rank_of(parent) is not None):
                    continue
                if rank is not None:
                    self.ranks[p] = rank
                    with contextlib.suppress(OSError, AttributeError):
                        fd = os.pidfd_open(p)
                        self._fds[fd] = p
                        self._poll.register(fd, select.POLLIN)
            seen: set[str] = set()
            for p in tree:
                seen |= shm_files(p)
            news += [f"shm {s}" for s in sorted(seen - self.segments)]
            self.segments |= seen
            self.pids.setdefault(self.pid, tree[self.pid])
        if news:
            self.guard.tell(*news)

    def processes(self) -> dict[int, int]:
        """The job's processes seen so far (pid -> start time), mpiexec's included."""
        with self._lock:
            return dict(self.pids)

    def states(self) -> dict[int, str]:
        """Each rank's process: running, stopped or ended."""
        with self._lock:
            return {r: ENDED if r in self.ended else state(p, self.pids[p])
                    for p, r in self.ranks.items()}

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
                    kill({p: s for p, s in self.pids.items() if p in self.ranks}, signal.SIGKILL)
                self._kill_at = None

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join()
        self._reap(0)
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()


def _completed(done: str) -> frozenset[int]:
    return frozenset(int(n.split(".")[1]) for n in os.listdir(done) if n.startswith("done."))


def _diagnose(watcher: _Watcher, done: str, nprocs: int, timeout: float) -> tuple[str, ...]:
    """The launcher's report of a job that did not end in time: who holds it up, and where."""
    watcher.scan()
    finished = _completed(done)
    stall = diagnose([r for r in range(nprocs) if r not in finished], nprocs, read_places(done),
                     watcher.states())
    return (*stall.lines(), f"found by the launcher after {timeout:g} s")


def _wait_gone(pids: Mapping[int, int], seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline and any(alive(p, s) for p, s in pids.items()):
        time.sleep(POLL_SECONDS)


def launch(nprocs: int, argv: Sequence[str], *, timeout: float, mpiexec: str | Path,
           env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
           scratch: Sequence[str | Path] = ()) -> JobResult:
    """Run ``mpiexec -n nprocs argv...`` with the guarantees of this module's docstring.

    ``scratch``: folders of the job's own (its inputs), which the guard removes if the caller
    dies before the job ends (otherwise they are the caller's to remove)."""
    guard = _Guard()
    try:
        with tempfile.TemporaryDirectory(prefix="spmdrules-done-") as done:
            guard.tell(*(f"dir {d}" for d in (done, *scratch)))
            return _run(nprocs, argv, timeout, mpiexec, env, cwd, done, guard)
    finally:
        guard.close()


def _run(nprocs: int, argv: Sequence[str], timeout: float, mpiexec: str | Path,
         env: Mapping[str, str] | None, cwd: str | Path | None, done: str,
         guard: _Guard) -> JobResult:
    full_env = {**(os.environ if env is None else env), DONE_DIR_ENV: done}
    cmd = [str(mpiexec), "-disable-auto-cleanup", "-n", str(nprocs), *argv]
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(cmd, cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    except BaseException:
        guard.clean = True  # nothing started
        raise
    guard.tell(f"pid {proc.pid} {start_time(proc.pid)}")
    watcher = _Watcher(proc.pid, t0, done, guard)
    watcher.start()
    timed_out, out, err = False, "", ""
    diagnosis: tuple[str, ...] = ()
    interrupted: BaseException | None = None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        diagnosis = _diagnose(watcher, done, nprocs, timeout)
        # ask hydra to tear the job down, then kill whatever is left (ranks live in sessions
        # of their own, so the process group of mpiexec is not enough)
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGINT)
        _wait_gone(watcher.processes(), GRACE_SECONDS)
        watcher.scan()
        kill(watcher.processes(), signal.SIGKILL)
        out, err = proc.communicate()
    except BaseException as e:
        # the caller was interrupted (KeyboardInterrupt): end the job now, then let it go on
        interrupted = e
        watcher.scan()
        kill(watcher.processes(), signal.SIGKILL)
        with contextlib.suppress(Exception):
            out, err = proc.communicate(timeout=GRACE_SECONDS)
    finally:
        watcher.stop()
    # Ranks may outlive mpiexec by a moment (hydra kills them asynchronously).
    ranks = {p: s for p, s in watcher.pids.items() if p != proc.pid}
    _wait_gone(ranks, GRACE_SECONDS)
    kill(ranks, signal.SIGKILL)
    removed = remove_files(watcher.segments)
    completed = _completed(done)
    # a failing rank's own report (abort.fail), which its stderr may not have delivered
    for n in sorted(os.listdir(done)):
        if n.startswith("failed."):
            report = Path(done, n).read_text()
            if report not in err:
                err += report
    places = {r: p.place for r, p in read_places(done).items()}
    wall = time.perf_counter() - t0
    guard.clean = True
    if interrupted is not None:
        raise interrupted
    return JobResult(-9 if timed_out else proc.returncode, out, err, timed_out, wall, nprocs,
                     completed, tuple(removed), tuple(sorted(watcher.segments)),
                     tuple(watcher.died), places, diagnosis)


def mpiexec_path() -> Path | None:
    """The venv's ``mpiexec`` (next to this interpreter), else one on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists():
        return here
    found = shutil.which("mpiexec")
    return Path(found) if found else None


__all__ = [
    "DONE_DIR_ENV",
    "SHM_DIR",
    "JobResult",
    "descendants",
    "launch",
    "mark_done",
    "mpiexec_path",
    "shm_files",
]
