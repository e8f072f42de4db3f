"""The pieces behind naming a stuck rank and ending an orphaned job, without MPI (issue 23): the
places ranks record and how they are read back, the diagnosis of which rank holds the others up,
the launcher's one-line account of a job, and the guard that ends a job whose launcher died."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from spmdrules.execution.launch import JobResult
from spmdrules.runtime import processes, progress
from spmdrules.runtime.processes import ENDED, STOPPED, alive, start_time
from spmdrules.runtime.progress import NO_PLACE, Place, diagnose, read_places


def _places(**seq_place: tuple[int, str]) -> dict[int, Place]:
    return {int(r[1:]): Place(s, 1, 1, "h", p) for r, (s, p) in seq_place.items()}


# -- diagnosis -----------------------------------------------------------------------------------
def test_the_rank_behind_the_others_is_stuck() -> None:
    places = _places(r0=(5, "instruction 4"), r1=(5, "instruction 4"), r2=(2, "feeds: checking"),
                     r3=(7, "instruction 6"))
    stall = diagnose(range(4), 4, places, {})
    assert stall.stuck == {2: ("feeds: checking", "the other ranks got further")}
    assert stall.waiting == {"instruction 4": [0, 1], "instruction 6": [3]}
    assert stall.lines() == [
        "rank 2 of 4 is stuck at feeds: checking (the other ranks got further)",
        "ranks [0, 1] wait at instruction 4", "rank 3 waits at instruction 6"]


def test_a_stopped_or_ended_process_is_stuck_even_where_the_others_wait() -> None:
    """The same place as the waiting ranks, but its process is stopped: that rank, not a
    waiting one, is named (the audit's case: the first watchdog named itself)."""
    places = _places(r0=(5, "instruction 4"), r1=(5, "instruction 4"), r2=(5, "instruction 4"))
    stall = diagnose(range(3), 3, places, {2: STOPPED, 0: "running"})
    assert stall.stuck == {2: ("instruction 4", "its process is stopped")}
    stall = diagnose(range(3), 3, places, {1: ENDED})
    assert stall.stuck == {1: ("instruction 4", "its process ended")}


def test_a_rank_without_a_place_is_behind_and_a_tie_names_no_rank() -> None:
    stall = diagnose(range(3), 3, _places(r0=(3, "setup: x"), r2=(3, "setup: x")), {})
    assert stall.stuck == {1: (NO_PLACE, "the other ranks got further")}
    stall = diagnose(range(2), 2, _places(r0=(3, "setup: x"), r1=(3, "setup: x")), {})
    assert stall.stuck == {}
    assert stall.lines()[0].startswith("no rank is behind the others")
    assert stall.lines()[1] == "ranks [0, 1] wait at setup: x"


def test_only_the_ranks_still_working_are_judged() -> None:
    """A rank that finished (the caller leaves it out) is not behind, however few its places."""
    places = _places(r0=(9, "the end"), r1=(4, "instruction 2"), r2=(6, "instruction 3"))
    assert diagnose([1, 2], 3, places, {}).stuck == {
        1: ("instruction 2", "the other ranks got further")}


# -- the places' records -------------------------------------------------------------------------
@pytest.fixture
def as_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This process as rank 3 of a job whose folder is tmp_path."""
    monkeypatch.setenv(progress.JOB_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("PMI_RANK", "3")
    monkeypatch.setattr(progress, "_board", None)
    yield tmp_path
    monkeypatch.setattr(progress, "_board", None)


def test_a_rank_records_its_place_and_others_read_it(as_rank: Path) -> None:
    progress.at("setup: first\twith a tab\nand a newline")
    progress.at("x" * 2000)  # cut to fit its record
    assert read_places(as_rank)[3].place == "x" * len(read_places(as_rank)[3].place)
    progress.at("é" * 1000)  # cut between characters, not inside one
    assert set(read_places(as_rank)[3].place) == {"é"}
    progress.at("instruction 7 (kernel 'é')")
    assert progress.current() == "instruction 7 (kernel 'é')"
    got = read_places(as_rank)
    assert got == {3: Place(4, os.getpid(), start_time(os.getpid()), got[3].host,
                            "instruction 7 (kernel 'é')")}
    assert os.path.getsize(as_rank / "place.3") == progress.RECORD_BYTES


def test_a_record_caught_half_written_is_not_believed(as_rank: Path) -> None:
    progress.at("feeds: checking the feeds")
    record = (as_rank / "place.3").read_bytes()
    (as_rank / "place.3").write_bytes(b"9" + record[1:])  # its two numbers now differ
    assert read_places(as_rank) == {}


def test_a_process_forked_from_a_rank_never_overwrites_its_record(as_rank: Path) -> None:
    progress.at("instruction 3")
    board = progress._board
    assert board is not None
    board.pid = -1  # as a forked child sees the board it inherited
    progress.at("the child's own place")
    assert progress.current() == "the child's own place"
    assert read_places(as_rank)[3].place == "instruction 3"


def test_outside_a_job_a_place_is_kept_in_memory_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(progress.JOB_DIR_ENV, raising=False)
    monkeypatch.setattr(progress, "_board", None)
    progress.at("somewhere")
    assert progress.current() == "somewhere" and not list(tmp_path.iterdir())
    monkeypatch.setattr(progress, "_board", None)


# -- the launcher's account ----------------------------------------------------------------------
def _job(**kw: object) -> JobResult:
    fields: dict[str, object] = {"returncode": 13, "stdout": "", "stderr": "", "timed_out": False,
                                 "wall": 9.0, "nprocs": 4, "completed": frozenset()}
    fields.update(kw)
    return JobResult(**fields)  # type: ignore[arg-type]


def test_the_account_names_the_stuck_rank_from_the_watchdogs_report() -> None:
    err = ("spmdrules: stall: rank 2 of 4 is stuck at feeds: checking (its process is stopped)\n"
           "spmdrules: stall: ranks [0, 1, 3] wait at feeds: sharing\n"
           "spmdrules: stall: found by rank 0's watchdog: MPIExecutor.run of 'm' did not finish "
           "within 8 s; rank 0 aborts the job (every rank ends now)\n")
    job = _job(stderr=err + err)  # twice: its copy from the job's folder
    assert job.stuck == {2: "feeds: checking (its process is stopped)"}
    assert job.describe() == (
        "mpiexec -n 4 failed (exit 13); rank 2 of 4 is stuck at feeds: checking (its process is "
        "stopped); ranks [0, 1, 3] wait at feeds: sharing; found by rank 0's watchdog: "
        "MPIExecutor.run of 'm' did not finish within 8 s; rank 0 aborts the job (every rank "
        "ends now)")


def test_the_account_gives_a_dead_ranks_place_and_the_launchers_own_diagnosis() -> None:
    job = _job(returncode=9, died=((2, 1.5),), places={2: "setup: loading the kernels"})
    assert job.describe() == ("mpiexec -n 4 failed (exit 9); rank 2 ended first without "
                              "finishing its work, at setup: loading the kernels, 1.50 s after "
                              "the start")
    job = _job(returncode=-9, timed_out=True, wall=42.0,
               diagnosis=("rank 1 of 4 is stuck at step 1 (its process is stopped)",
                          "found by the launcher after 40 s"))
    assert job.stuck == {1: "step 1 (its process is stopped)"}
    assert job.describe() == ("mpiexec -n 4 timed out after 42.0 s (killed); rank 1 of 4 is "
                              "stuck at step 1 (its process is stopped); found by the launcher "
                              "after 40 s")


# -- the guard -----------------------------------------------------------------------------------
def _guard() -> subprocess.Popen[bytes]:
    return subprocess.Popen(processes.guard_argv(), stdin=subprocess.PIPE,
                            start_new_session=True)


@pytest.fixture
def orphan(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, Path]]:
    """A job's stand-ins: a process (with a child of its own), a shared-memory file, a folder."""
    proc = subprocess.Popen(["sh", "-c", "sleep 600 & wait"], start_new_session=True)
    shm = processes.SHM_DIR / f"spmdrules-test-guard-{uuid.uuid4().hex}"
    shm.touch()
    folder = tmp_path / "job"
    folder.mkdir()
    yield proc, shm, folder
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    shm.unlink(missing_ok=True)


def _record(proc: subprocess.Popen[bytes], shm: Path, folder: Path) -> bytes:
    return f"pid {proc.pid} {start_time(proc.pid)}\nshm {shm}\ndir {folder}\n".encode()


def test_the_guard_ends_a_job_whose_launcher_died(
        orphan: tuple[subprocess.Popen[bytes], Path, Path]) -> None:
    proc, shm, folder = orphan
    deadline = time.monotonic() + 60
    while len(below := processes.descendants(proc.pid)) < 2:  # the shell's child, not recorded
        assert time.monotonic() < deadline, "the stand-in's child never started"
        time.sleep(0.05)
    guard = _guard()
    guard.communicate(_record(proc, shm, folder), timeout=60)  # EOF without "end": it died
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert not [p for p, s in below.items() if alive(p, s)]
    assert not shm.exists() and not folder.exists()


def test_the_guard_stands_down_after_a_clean_end(
        orphan: tuple[subprocess.Popen[bytes], Path, Path]) -> None:
    proc, shm, folder = orphan
    guard = _guard()
    guard.communicate(_record(proc, shm, folder) + b"end\n", timeout=60)
    assert guard.returncode == 0
    assert proc.poll() is None and shm.exists() and folder.exists()


def test_the_guard_never_kills_a_process_that_reuses_a_recorded_pid(
        orphan: tuple[subprocess.Popen[bytes], Path, Path]) -> None:
    """A recorded pid whose start time differs is another process now: left alone."""
    proc = orphan[0]
    guard = _guard()
    guard.communicate(f"pid {proc.pid} {start_time(proc.pid) + 1}\n".encode(), timeout=60)
    assert guard.returncode == 0 and proc.poll() is None


def test_ranks_whose_ends_were_seen_together_are_named_together() -> None:
    """On a loaded machine the launcher's watcher may see two ranks' ends in one poll (the
    stopped rank and one that failed on the lost connection at once): it cannot tell which
    ended first, so it names both, each with its place, and never only the lower rank."""
    places = {0: "instruction 4 (all_reduce)", 2: "instruction 4 (all_reduce)"}
    job = JobResult(returncode=9, stdout="", stderr="", timed_out=False, wall=3.3, nprocs=4,
                    completed=frozenset(), died=((0, 3.2), (2, 3.2), (3, 3.21)), places=places)
    assert job.first_died == (0, 2)
    said = job.describe()
    assert "ranks [0, 2] ended without finishing their work, seen together 3.20 s" in said, said
    assert "rank 0 at instruction 4 (all_reduce), rank 2 at instruction 4 (all_reduce)" in said
    alone = JobResult(returncode=9, stdout="", stderr="", timed_out=False, wall=3.3, nprocs=4,
                      completed=frozenset(), died=((2, 3.1), (0, 3.2)), places=places)
    assert alone.first_died == (2,)
    assert "rank 2 ended first without finishing its work, at instruction 4" in alone.describe()
