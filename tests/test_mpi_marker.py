"""The tests that launch mpiexec carry ``@pytest.mark.mpi`` (issue 25): where there is no mpiexec
they are skipped with a reason, under pytest-xdist they all go to one worker (one job at a time),
and a test without the marker cannot start a job."""

from __future__ import annotations

import os
import re
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


@pytest.mark.timeout(240)
def test_without_mpiexec_the_mpi_tests_are_skipped_with_a_reason(tmp_path: Path) -> None:
    python = _interpreter_without_mpiexec(tmp_path)
    fake_path = tmp_path / "path"
    fake_path.mkdir()
    (fake_path / "mpiexec").write_text("#!/bin/sh\nexit 0\n")  # not executable: not an mpiexec
    env = {**os.environ, "PATH": str(fake_path), "SPMDRULES_SHM_CHECK": "own"}
    run = subprocess.run(
        [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-v", "-rs", "-n", "2",
         "--dist", "loadfile", "--basetemp", str(tmp_path / "runs"), *FILES],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=200)
    out = run.stdout
    assert run.returncode == 0, out[-4000:] + run.stderr[-2000:]
    # e2e/test_mpi.py: 6 tests, label_smooth: 1 of 5; the other four still run
    assert re.search(r"\b4 passed, 7 skipped\b", out), out[-3000:]
    reason = f"no mpiexec next to {python} or on PATH: install the mpi extra"
    summary = [ln for ln in out.splitlines() if ln.startswith("SKIPPED [")]
    assert len(summary) == 3 and all(reason in ln for ln in summary), out[-3000:]
    # under xdist, one worker runs every MPI test
    skipped = re.findall(r"\[(gw\d+)\][^\n]* SKIPPED (\S+)", out)
    assert len(skipped) == 7 and len({w for w, _ in skipped}) == 1, out[-3000:]


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
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider",
             "-n", "2", "--dist", "loadfile", "-q", "test_holds.py", "test_quick.py"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=200)
    finally:
        segment.unlink(missing_ok=True)
    out = run.stdout + run.stderr
    assert "2 passed" in out, out[-3000:]
    # (other MPI jobs on this machine may add segments of their own: only this one is looked for)
    if leave:
        assert run.returncode == 1, out[-3000:]
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
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-v",
         "-n", "2", "--dist", "loadfile", "test_first.py", "test_second.py", "test_alone1.py",
         "test_alone2.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=200)
    out = run.stdout + run.stderr
    assert run.returncode == 0 and "8 passed" in out, out[-3000:]
    grouped = re.findall(r"\[(gw\d+)\][^\n]* PASSED test_(?:first|second)\.py", out)
    assert len(grouped) == 6, out[-3000:]
    assert len(set(grouped)) == 1, out[-3000:]
    alone = re.findall(r"\[(gw\d+)\][^\n]* PASSED test_alone", out)
    assert len(alone) == 2, out[-3000:]

