"""The processes of an MPI job as Linux's ``/proc`` shows them, and the guard that ends a job
whose launcher died.

The launcher (:mod:`spmdrules.execution.launch`) and the ranks' watchdog
(:mod:`spmdrules.runtime.progress`) read the job's processes here: the process tree below
``mpiexec``, each process's state and start time (a pid can be reused), its MPI rank, and the
files under ``/dev/shm`` it holds (MPICH's ``mpich_shm_*`` segments).

**The guard.** A job outlives its launcher: ``mpiexec`` runs in a session of its own, and its
proxy and ranks further below, so when the process that called
:func:`~spmdrules.execution.launch.launch` is killed (SIGKILL, SIGTERM), nothing ends them, and
MPICH's segments, which only ``MPI_Finalize`` unlinks, stay in ``/dev/shm``. So every job has a
guard: this file run as a script (:func:`guard_argv`: the standard library only, so it starts
in milliseconds), in a session of its own. The launcher tells it, on its stdin, one line
at a time, what the job owns::

    pid <pid> <start time>   a process of the job (mpiexec first, then each one it finds)
    shm <path>               a shared-memory file a process of the job held
    dir <path>               a folder of the job (its markers, its inputs)
    end                      the launcher ended the job and cleaned up itself

The guard reads until the end of its stdin. Ending with ``end``, it exits. Ending otherwise, the
launcher died: the guard kills every recorded process still alive and every process below them,
then removes the shared-memory files they held (those recorded and those it finds on them) and
the job's folders. The pipe's write end is the launcher's alone (not inherited by the programs
it starts); a child the launcher forks without ``exec`` would keep it open, and delay the guard
until that child ends too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

#: where MPICH (and POSIX shm_open) puts shared-memory segments
SHM_DIR: Final = Path("/dev/shm")
#: what :func:`state` says of a process
RUNNING: Final = "running"
STOPPED: Final = "stopped"
ENDED: Final = "ended"
#: how long the guard waits for the processes it killed to be gone before removing their files
GUARD_WAIT_SECONDS: Final = 10.0


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: the fields follow the last ')'
    return stat[stat.rindex(b")") + 2 :].split()


def start_time(pid: int) -> int:
    """When process ``pid`` started (clock ticks since boot; -1 if it is gone)."""
    fields = stat_fields(pid)
    return -1 if fields is None else int(fields[19])


def state(pid: int, start: int) -> str:
    """:data:`RUNNING`, :data:`STOPPED` (SIGSTOP, or a debugger) or :data:`ENDED` (gone, a
    zombie, or the pid now belongs to another process) of the process recorded as (pid, start)."""
    fields = stat_fields(pid)
    if fields is None or fields[0] == b"Z" or int(fields[19]) != start:
        return ENDED
    return STOPPED if fields[0] in (b"T", b"t") else RUNNING


def alive(pid: int, start: int) -> bool:
    """The process recorded as (pid, start) still runs (not a zombie, not a reused pid)."""
    return state(pid, start) != ENDED


def kill(pids: Mapping[int, int], sig: int) -> None:
    """Send ``sig`` to every process of ``pids`` (pid -> start time) that is still alive."""
    for p, start in pids.items():
        if alive(p, start):
            with contextlib.suppress(OSError):
                os.kill(p, sig)


def parents() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start time) of every process visible in /proc."""
    out: dict[int, tuple[int, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = stat_fields(int(entry.name))
        if fields is not None:
            out[int(entry.name)] = (int(fields[1]), int(fields[19]))
    return out


def descendants(pid: int, table: Mapping[int, tuple[int, int]] | None = None) -> dict[int, int]:
    """``pid`` and every process below it, each with its start time (to tell a reused pid);
    ``table``: a snapshot of :func:`parents` to read instead of a new one."""
    if table is None:
        table = parents()
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


def rank_of(pid: int) -> int | None:
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


def remove_files(paths: Iterable[str]) -> list[str]:
    """Unlink each of ``paths`` that still exists; the ones removed, in order."""
    removed = []
    for path in sorted(paths):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed.append(path)
    return removed


def end_orphaned_job(lines: Iterable[str]) -> None:
    """What the guard does when the launcher died: see the module's docstring."""
    recorded: dict[int, int] = {}
    segments: set[str] = set()
    folders: list[str] = []
    for line in lines:
        kind, _, rest = line.partition(" ")
        if kind == "pid":
            pid, start = rest.split()
            recorded[int(pid)] = int(start)
        elif kind == "shm":
            segments.add(rest)
        elif kind == "dir":
            folders.append(rest)
    # the processes below a recorded one too: mpiexec's children stay below it when the
    # launcher dies, and a rank may have started after the launcher's last look
    table = parents()
    job: dict[int, int] = {}
    for p, born in recorded.items():
        if alive(p, born):
            job.update(descendants(p, table))
        job.setdefault(p, born)
    for p in job:
        segments |= shm_files(p)
    kill(job, signal.SIGKILL)  # a stopped process ends too
    deadline = time.monotonic() + GUARD_WAIT_SECONDS
    while time.monotonic() < deadline and any(alive(p, s) for p, s in job.items()):
        time.sleep(0.02)
    remove_files(segments)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def guard_argv() -> list[str]:
    """The command that starts a guard: this file with the standard library alone (``-I``: no
    environment, no script folder, whose modules are no top-level ones; ``-S``: no site)."""
    return [sys.executable, "-I", "-S", __file__]


def guard_main() -> int:
    """The guard's main: read the job's record until EOF, then stand down or end the job."""
    lines = sys.stdin.buffer.read().decode(errors="replace").splitlines()
    if lines and lines[-1] == "end":
        return 0
    end_orphaned_job(lines)
    return 0


if __name__ == "__main__":
    sys.exit(guard_main())
