"""Where each rank of a job is, and which rank holds the others up.

A rank that stops (killed, stopped by a signal, or stuck in a wait of its own) leaves the other
ranks waiting in their next collective. Its partners cannot see it: to them, a stopped rank
and a slow one look the same. So each rank records its **place** as it goes (``setup: ...``,
``feeds: ...``, ``instruction 4 (kernel 'fc1.gelu' ...)``) with :func:`at`, and whoever has to
explain a job that does not finish (a rank's watchdog, the launcher at its timeout) reads
every rank's place and tells the stuck rank from the waiting ones (:func:`diagnose`):

- a rank whose process **ended** or is **stopped** (read from ``/proc``) is the stuck one;
- otherwise the rank(s) **behind** the others: every rank passes the same places in the same
  order (SPMD), so each place is numbered, and the ranks with the lowest number are stuck where
  they are while the others went on to wait further along;
- if every rank is at the same place, none is behind (the ranks wait for each other, or one is
  stuck inside the step where the others wait): the report says so instead of naming one.

A rank records its place in memory (for its own error messages) and, in a job that spmdrules
launches (the job's folder is in ``SPMDRULES_DONE_DIR``), in ``place.<rank>`` in that folder:
one fixed-size record written in place with one ``pwrite`` (a few microseconds; the MPI
executor records a place per instruction). A reader checks the record's number, written at
both ends, so a record caught half-written is never believed.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple

from spmdrules.runtime.processes import ENDED, STOPPED, start_time, state

#: the job's folder (the same variable as the launcher's completion markers)
JOB_DIR_ENV: Final = "SPMDRULES_DONE_DIR"
#: bytes of one place record (a longer place is cut to fit)
RECORD_BYTES: Final = 512
_FILE = "place.{rank}"


class Place(NamedTuple):
    """One rank's record: the place's number (1 for the first), the rank's process, the place."""

    seq: int
    pid: int
    start: int
    host: str
    place: str


class _Board:
    """This process's place, and its record in the job's folder (if it is a rank of one;
    ``record`` unset: a process forked from a rank, which must not overwrite the rank's)."""

    def __init__(self, record: bool) -> None:
        self.pid = os.getpid()
        self.seq = 0
        self.place = "the start"
        self.fd: int | None = None
        self.head = f"{self.pid}\t{start_time(self.pid)}\t{socket.gethostname()}"
        job, rank = os.environ.get(JOB_DIR_ENV), os.environ.get("PMI_RANK")
        if record and job and rank is not None and os.path.isdir(job):
            self.fd = os.open(Path(job, _FILE.format(rank=int(rank))),
                              os.O_WRONLY | os.O_CREAT, 0o600)

    def at(self, place: str) -> None:
        self.seq += 1
        self.place = place
        if self.fd is None:
            return
        head, tail = f"{self.seq}\t{self.head}\t".encode(), f"\t{self.seq}\n".encode()
        text = place.replace("\t", " ").replace("\n", " ").encode()
        # cut to fit, never inside a character
        text = text[: RECORD_BYTES - len(head) - len(tail)].decode(errors="ignore").encode()
        os.pwrite(self.fd, (head + text + tail).ljust(RECORD_BYTES), 0)


_board: _Board | None = None


def _the_board() -> _Board:
    global _board
    if _board is None:
        _board = _Board(record=True)
    elif _board.pid != os.getpid():
        _board = _Board(record=False)  # a forked child
    return _board


def at(place: str) -> None:
    """Record that this rank is now at ``place`` (it has done everything before it)."""
    _the_board().at(place)


def current() -> str:
    """This rank's place (the last :func:`at`)."""
    return _the_board().place


def read_places(job_dir: str | Path) -> dict[int, Place]:
    """Every rank's last recorded place in the job's folder, by rank."""
    out: dict[int, Place] = {}
    for path in Path(job_dir).glob(_FILE.format(rank="*")):
        for _ in range(3):  # a record being rewritten is read again
            try:
                fields = path.read_bytes().decode(errors="replace").rstrip().split("\t")
            except OSError:
                break
            if len(fields) == 6 and fields[0] == fields[5] and fields[0].isdigit():
                seq, pid, start, host, place, _ = fields
                out[int(path.name.split(".")[1])] = Place(int(seq), int(pid), int(start), host,
                                                          place)
                break
    return out


def states_here(places: Mapping[int, Place]) -> dict[int, str]:
    """The state of each rank's process that runs on this host (others are not known here)."""
    host = socket.gethostname()
    return {r: state(p.pid, p.start) for r, p in places.items() if p.host == host}


@dataclass(frozen=True)
class Stall:
    """Which ranks hold a job up, and where the others wait."""

    nprocs: int
    #: rank -> (its place, why it is the stuck one)
    stuck: dict[int, tuple[str, str]]
    #: place -> the ranks waiting there
    waiting: dict[str, list[int]]

    def lines(self) -> list[str]:
        """The report: the stuck ranks first, then where the others wait."""
        out = [f"rank {r} of {self.nprocs} is stuck at {place} ({why})"
               for r, (place, why) in self.stuck.items()]
        if not self.stuck:
            out.append("no rank is behind the others (every rank waits at the same place: they "
                       "wait for each other, or one is stuck inside the step where the others "
                       "wait)")
        out.extend(f"{_ranks(rs)} {'waits' if len(rs) == 1 else 'wait'} at {place}"
                   for place, rs in self.waiting.items())
        return out


def _ranks(rs: list[int]) -> str:
    return f"rank {rs[0]}" if len(rs) == 1 else f"ranks {rs}"


NO_PLACE: Final = "no place yet (it has not started its work)"


def diagnose(ranks: Iterable[int], nprocs: int, places: Mapping[int, Place],
             states: Mapping[int, str]) -> Stall:
    """Tell the ranks that hold the others up (see the module's docstring) among ``ranks``
    (the ranks that should still be working), from their ``places`` and the ``states`` of their
    processes (:data:`~spmdrules.runtime.processes.STOPPED`, ``ENDED``; unknown ones absent)."""
    ranks = sorted(ranks)

    def where(r: int) -> str:
        return places[r].place if r in places else NO_PLACE

    stuck = {r: (where(r), "its process is stopped" if states[r] == STOPPED
                 else "its process ended")
             for r in ranks if states.get(r) in (STOPPED, ENDED)}
    if not stuck and ranks:
        seq = {r: places[r].seq if r in places else 0 for r in ranks}
        low = min(seq.values())
        if low < max(seq.values()):
            stuck = {r: (where(r), "the other ranks got further") for r in ranks
                     if seq[r] == low}
    waiting: dict[str, list[int]] = {}
    for r in ranks:
        if r not in stuck:
            waiting.setdefault(where(r), []).append(r)
    return Stall(nprocs, stuck, waiting)


__all__ = ["NO_PLACE", "Place", "Stall", "at", "current", "diagnose", "read_places",
           "states_here"]
