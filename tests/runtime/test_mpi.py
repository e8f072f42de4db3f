"""Run the MPI cases of ``mpi_cases.py`` under real ``mpiexec -n N`` for N = 1..12 (and 48).

One job per N runs every case that fits; each (N, case) pair is then its own pytest test,
passing only if every rank printed PASS for it.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path

import mpirun
import pytest

pytestmark = pytest.mark.mpi

HERE = Path(__file__).resolve().parent


def _load(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(f"runtime_tests_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


cases = _load("mpi_cases")

SIZES = list(range(1, 13))
BIG = 48  # the seed's 4x4x3 example needs 48 workers
BIG_CASES = ["seed000_example4_4x4x3_to_1x1x3", "seed000_example5_refused"]
JOB_TIMEOUT = 150.0


@cache
def job(n: int) -> tuple[dict[str, set[int]], str]:
    args = [str(HERE / "mpi_cases.py")] + (BIG_CASES if n == BIG else [])
    res = mpirun.mpirun(n, args, timeout=JOB_TIMEOUT)
    passed: dict[str, set[int]] = {}
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "PASS":
            passed.setdefault(parts[1], set()).add(int(parts[2]))
    status = "timed out (killed)" if res.timed_out else f"exit code {res.returncode}"
    report = f"mpiexec -n {n}: {status}\n--- stdout ---\n{res.stdout[-6000:]}\n" \
             f"--- stderr ---\n{res.stderr[-3000:]}"
    if res.returncode != 0 or res.timed_out:
        passed["__job__"] = set()
    else:
        passed["__job__"] = set(range(n))
    return passed, report


def _turn(n: int) -> pytest.MarkDecorator | tuple[()]:
    """The 48-rank job runs with no other job beside it (tests/support/xdist_mpi.py)."""
    return pytest.mark.mpi(alone=True) if n == BIG else ()


PAIRS = [(n, name) for n in SIZES for name in cases.cases_for(n) if name not in BIG_CASES[:1]]
PAIRS += [(BIG, name) for name in BIG_CASES]


@pytest.mark.timeout(JOB_TIMEOUT + 30)
@pytest.mark.parametrize(("n", "name"), [pytest.param(n, c, marks=_turn(n), id=f"n{n}-{c}")
                                         for n, c in PAIRS])
def test_case(n: int, name: str) -> None:
    passed, report = job(n)
    ranks = passed.get(name, set())
    if ranks != set(range(n)):
        missing = sorted(set(range(n)) - ranks)
        pytest.fail(f"case {name} did not pass on ranks {missing} of {n}\n{report}")


@pytest.mark.timeout(JOB_TIMEOUT + 30)
@pytest.mark.parametrize("n", [pytest.param(n, marks=_turn(n), id=str(n)) for n in [*SIZES, BIG]])
def test_job_exits_cleanly(n: int) -> None:
    passed, report = job(n)
    assert passed["__job__"] == set(range(n)), report
