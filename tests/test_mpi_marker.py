"""The tests that launch mpiexec carry ``@pytest.mark.mpi`` (issue 25): where there is no mpiexec
they are skipped with a reason, under pytest-xdist they spread over the workers but take turns
(at most two jobs at once, the 48-rank one alone), and a test without the marker cannot start a
job. The suite's xdist runs are run here too, nested, as runs of their own."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from pipeline_cases import CASES

from spmdrules.completion import complete
from spmdrules.execution.executor import random_feeds
from spmdrules.execution.lowering import lower
from spmdrules.execution.mpi import run_mpi

ROOT = Path(__file__).resolve().parents[1]
#: one file whose every test launches mpiexec, one where one test of five does
FILES = ["tests/e2e/test_mpi.py", "tests/rules/test_label_smooth.py"]


#: seconds a nested pytest run may take before it is killed, all its processes with it
NESTED_TIMEOUT = 200.0
#: what an xdist worker puts in its environment for its tests: a nested run is not that worker
_OUTER_RUN = ("PYTEST_XDIST_", "PYTEST_CURRENT_TEST", "PYTEST_VERSION")


def nested_pytest(args: list[str], *, cwd: Path, env: dict[str, str],
                  python: str | Path = sys.executable,
                  timeout: float = NESTED_TIMEOUT,
                  stacks_after: float | None = None) -> tuple[int, str]:
    """Run ``python -m pytest args...`` as a run of its own: its exit status and its output.

    The run (its controller and, under ``-n``, its xdist workers) is a process group of its own,
    and the whole group is killed when it ends or times out, so no worker of it outlives its
    controller in this process (under xdist, this process is itself a worker: a nested worker
    left behind would hold the output pipe and the outer worker with it). The environment that
    the outer run gave this test is dropped, and faulthandler prints every thread of a stuck
    run before the timeout, so a hang is reported, with where it is, as this test's failure:
    ``stacks_after`` seconds after a nested test starts (by default 0.8 of the timeout, which
    counts from the run's start: a nested run that starts slowly on a loaded machine needs the
    stacks earlier)."""
    env = {k: v for k, v in env.items() if not k.startswith(_OUTER_RUN)}
    stacks = timeout * 0.8 if stacks_after is None else stacks_after
    cmd = [str(python), "-m", "pytest", "-p", "no:cacheprovider",
           "-o", f"faulthandler_timeout={stacks:g}", *args]
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the nested run {cmd} did not end in {timeout:g} s (killed):\n"
                    f"{out[-6000:]}")
    finally:
        # a worker that outlived its controller (the group is empty after a clean end)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return proc.returncode, out


def test_a_test_without_the_marker_cannot_launch_mpiexec() -> None:
    prog = lower(complete(CASES["2d-megatron"]()))
    with pytest.raises(AssertionError, match=re.escape(
            "test_a_test_without_the_marker_cannot_launch_mpiexec launches mpiexec: mark it "
            "@pytest.mark.mpi")):
        run_mpi(prog, random_feeds(prog, seed=3), nprocs=4, timeout=60)


def _interpreter_without_mpiexec(tmp_path: Path) -> Path:
    """A virtual environment that runs this interpreter with this one's packages, but has no
    mpiexec beside its ``python`` (as in a clone installed without the mpi extra)."""
    home = tmp_path / "venv"
    site = home / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (home / "bin").mkdir(parents=True)
    site.parent.mkdir(parents=True)
    site.symlink_to(sysconfig.get_path("purelib"))
    (home / "bin" / "python").symlink_to(sys.executable)
    cfg = Path(sys.prefix) / "pyvenv.cfg"
    (home / "pyvenv.cfg").write_text(
        cfg.read_text() if cfg.is_file() else
        f"home = {Path(os.path.realpath(sys.executable)).parent}\n"
        "include-system-site-packages = true\n")
    return home / "bin" / "python"


STUCK_TEST = '''
import os, subprocess, threading


def test_stuck() -> None:
    # a process of the run that holds the output pipe, as an xdist worker does
    child = subprocess.Popen(["sleep", "600"])
    with open(os.environ["CHILD_PID"], "w") as f:
        f.write(str(child.pid))
    threading.Event().wait()
'''


@pytest.mark.timeout(240)
def test_a_stuck_nested_run_fails_with_its_stacks_and_leaves_no_process(tmp_path: Path) -> None:
    """A nested run that never ends is this test's failure, with where each thread of it waits,
    and takes every process of it along: none holds the output pipe (the outer run would wait
    for it), none outlives it."""
    (tmp_path / "test_stuck.py").write_text(STUCK_TEST)
    pid_file = tmp_path / "child.pid"
    env = {**os.environ, "CHILD_PID": str(pid_file)}
    # the stacks 5 s into the stuck test, the kill 30 s into the run: the nested run may take up
    # to 25 s to reach its test (at a load of 17 it took over 6 s, and stacks due 24 s into the
    # test never came)
    with pytest.raises(pytest.fail.Exception, match="did not end in 30 s") as failed:
        nested_pytest(["-p", "no:timeout", "test_stuck.py"], cwd=tmp_path, env=env, timeout=30,
                      stacks_after=5)
    assert "Timeout (0:00:05)!" in str(failed.value) and "test_stuck" in str(failed.value)
    child = int(pid_file.read_text())
    state = Path(f"/proc/{child}/stat")
    assert not state.exists() or state.read_text().split(") ")[1][0] == "Z", \
        f"the nested run's process {child} outlived it"


@pytest.mark.timeout(240)
def test_without_mpiexec_the_mpi_tests_are_skipped_with_a_reason(tmp_path: Path) -> None:
    python = _interpreter_without_mpiexec(tmp_path)
    fake_path = tmp_path / "path"
    fake_path.mkdir()
    (fake_path / "mpiexec").write_text("#!/bin/sh\nexit 0\n")  # not executable: not an mpiexec
    env = {**os.environ, "PATH": str(fake_path), "SPMDRULES_SHM_CHECK": "own"}
    code, out = nested_pytest(["-v", "-rs", "-n", "2", "--dist", "loadfile", "--basetemp",
                               str(tmp_path / "runs"), *FILES], cwd=ROOT, env=env, python=python)
    assert code == 0, out[-6000:]
    # e2e/test_mpi.py: 6 tests, label_smooth: 1 of 5; the other four still run
    assert re.search(r"\b4 passed, 7 skipped\b", out), out[-3000:]
    reason = f"no mpiexec next to {python} or on PATH: install the mpi extra"
    summary = [ln for ln in out.splitlines() if ln.startswith("SKIPPED [")]
    assert len(summary) == 3 and all(reason in ln for ln in summary), out[-3000:]
    skipped = re.findall(r"\[(gw\d+)\][^\n]* SKIPPED (\S+)", out)
    assert len(skipped) == 7, out[-3000:]


SHM_TESTS = '''
import os, time
from pathlib import Path

SEGMENT = Path(os.environ["FAKE_SEGMENT"])


def test_a_job_holds_a_segment_a_while() -> None:
    SEGMENT.write_bytes(b"")
    time.sleep(float(os.environ["HOLD_SECONDS"]))
    if os.environ["LEAVE_IT"] == "0":
        SEGMENT.unlink()
'''


@pytest.mark.timeout(240)
@pytest.mark.parametrize("leave", [False, True], ids=["removed", "left"])
def test_the_whole_shm_check_sees_the_run_not_one_worker(tmp_path: Path, leave: bool) -> None:
    """Under xdist, /dev/shm is compared before and after the whole run: a segment that a job on
    one worker holds while another worker ends is not counted, one left at the end is."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm on this machine")
    segment = shm / f"mpich_shm_spmdrules_test_{os.getpid()}_{leave}"
    (tmp_path / "test_holds.py").write_text(SHM_TESTS)
    (tmp_path / "test_quick.py").write_text("def test_quick() -> None:\n    pass\n")
    env = {**os.environ, "SPMDRULES_SHM_CHECK": "all", "FAKE_SEGMENT": str(segment),
           "HOLD_SECONDS": "10", "LEAVE_IT": str(int(leave)),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT / "tests" / "support")])}
    try:
        code, out = nested_pytest(["-p", "conftest", "-n", "2", "--dist", "loadfile", "-q",
                                   "test_holds.py", "test_quick.py"], cwd=tmp_path, env=env)
    finally:
        segment.unlink(missing_ok=True)
    assert "2 passed" in out, out[-3000:]
    # (other MPI jobs on this machine may add segments of their own: only this one is looked for)
    if leave:
        assert code == 1, out[-3000:]
        assert re.search(rf"FAILED \(shared memory\): .*{segment}", out), out[-3000:]
    else:
        assert str(segment) not in out, out[-3000:]


GROUPED_TESTS = '''
import os

import pytest

pytestmark = pytest.mark.xdist_group("shared fixture")


@pytest.mark.parametrize("i", range(3))
def test_grouped(i: int) -> None:
    print("RAN ON", os.environ["PYTEST_XDIST_WORKER"])
'''


@pytest.mark.timeout(240)
def test_files_of_one_xdist_group_run_on_one_worker(tmp_path: Path) -> None:
    """Two files marked ``xdist_group("shared fixture")`` (the two largest units: without the
    group, the first two workers would take one each) run on one worker, so a session fixture
    they share is built once per run (tests/conformance's ``compared``)."""
    for name in ("test_first", "test_second"):
        (tmp_path / f"{name}.py").write_text(GROUPED_TESTS)
    for name in ("test_alone1", "test_alone2"):
        (tmp_path / f"{name}.py").write_text("def test_quick() -> None:\n    pass\n")
    env = {**os.environ, "SPMDRULES_SHM_CHECK": "own",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT / "tests" / "support")])}
    code, out = nested_pytest(["-p", "conftest", "-v", "-n", "2", "--dist", "loadfile",
                               "test_first.py", "test_second.py", "test_alone1.py",
                               "test_alone2.py"], cwd=tmp_path, env=env)
    assert code == 0 and "8 passed" in out, out[-3000:]
    grouped = re.findall(r"\[(gw\d+)\][^\n]* PASSED test_(?:first|second)\.py", out)
    assert len(grouped) == 6, out[-3000:]
    assert len(set(grouped)) == 1, out[-3000:]
    alone = re.findall(r"\[(gw\d+)\][^\n]* PASSED test_alone", out)
    assert len(alone) == 2, out[-3000:]



TURN_TESTS = '''
import os, time

import pytest

LOG = os.environ["TURN_LOG"]


def _hold(name: str) -> None:
    """Record when this test's turn began and ended (the turn is held around the test)."""
    start = time.time()
    time.sleep(0.4)
    with open(LOG, "a") as f:
        f.write(f"{name} {start} {time.time()}\\n")


@pytest.mark.mpi
@pytest.mark.parametrize("i", range(4))
def test_job(i: int) -> None:
    _hold(f"{__name__}-{i}")
'''

ALONE_TEST = '''
from test_jobs_a import _hold

import pytest


@pytest.mark.mpi(alone=True)
@pytest.mark.parametrize("i", range(2))
def test_big_job(i: int) -> None:
    _hold(f"alone-{i}")
'''


@pytest.mark.timeout(240)
def test_mpi_tests_spread_over_workers_in_turns(tmp_path: Path) -> None:
    """Under xdist, MPI tests go with their files to every worker, but at most two of them run
    at once (tests/support/xdist_mpi.py's ``JOB_SLOTS``), and one marked ``mpi(alone=True)``
    (tests/runtime/test_mpi.py's 48 ranks) runs with no other beside it: three workers, three
    files of MPI tests that record when each held its turn."""
    log = tmp_path / "turns.log"
    for name in ("test_jobs_a", "test_jobs_b"):
        (tmp_path / f"{name}.py").write_text(TURN_TESTS)
    (tmp_path / "test_jobs_big.py").write_text(ALONE_TEST)
    env = {**os.environ, "SPMDRULES_SHM_CHECK": "own", "TURN_LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "tests"),
                                          str(ROOT / "tests" / "support")])}
    code, out = nested_pytest(["-p", "conftest", "-v", "-n", "3", "--dist", "loadfile"],
                              cwd=tmp_path, env=env)
    assert code == 0 and "10 passed" in out, out[-3000:]
    assert len(set(re.findall(r"\[(gw\d+)\][^\n]* PASSED", out))) > 1, out[-3000:]
    turns = [(name, float(a), float(b)) for name, a, b in
             (ln.split() for ln in log.read_text().splitlines())]
    assert len(turns) == 10, turns
    for name, start, end in turns:
        beside = [other for other, a, b in turns if other != name and a < end and b > start]
        if name.startswith("alone"):
            assert not beside, (name, beside)
        else:  # at any instant, no more than one other turn: check at each start inside it
            at = [max(start, a) for other, a, b in turns if other != name and a < end and b > start]
            for t in at:
                running = [o for o, a, b in turns if o != name and a <= t < b]
                assert len(running) <= 1, (name, t, running)
