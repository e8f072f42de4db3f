"""The cost model's calibration: the packaged measurements behind the default model, and precise
errors for a calibration file that is missing or malformed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import spmdrules as sr
from spmdrules.completion.cost import (
    CALIBRATION,
    CALIBRATION_FILE,
    DEFAULT_COST_MODEL,
    CostModelError,
    LinkCost,
    load_calibration,
)

GOOD = {
    "collective": {"alpha": 6e-6, "beta": 5e-10},
    "p2p": {"alpha": 7e-6, "beta": 2e-10},
    "machine": "x86_64, 2 cores, Linux",
    "mpi": "MPICH Version: 5.0.2",
    "date": "2026-11-21",
    "command": "python bench/calibrate.py --write",
}


def test_the_default_model_is_the_packaged_calibration() -> None:
    assert load_calibration(CALIBRATION_FILE) == CALIBRATION
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
    for m in (0, 1):
        assert DEFAULT_COST_MODEL.link(mesh, m) == CALIBRATION.collective
    assert DEFAULT_COST_MODEL.p2p == CALIBRATION.p2p
    # measured on MPI, the links are far from free and far from a network's latency
    assert 1e-7 < CALIBRATION.collective.alpha < 1e-3
    assert 1e-12 < CALIBRATION.collective.beta < 1e-7


def test_a_calibration_file_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({**GOOD, "per_dim": {"dp": {"allreduce": [1e-6, 1e-9]}}}))
    cal = load_calibration(path)
    assert cal.collective == LinkCost(6e-6, 5e-10) and cal.p2p == LinkCost(7e-6, 2e-10)
    assert cal.cost_model.default == cal.collective and cal.cost_model.p2p == cal.p2p


def test_a_missing_file_names_the_command(tmp_path: Path) -> None:
    with pytest.raises(CostModelError, match=r"bench/calibrate.py --write"):
        load_calibration(tmp_path / "nope.json")


@pytest.mark.parametrize(("change", "message"), [
    ({"collective": {"alpha": 1e-6}}, "'collective' must be an object with 'alpha' and 'beta'"),
    ({"p2p": {"alpha": -1.0, "beta": 0.0}}, "alpha must be a number >= 0"),
    ({"date": 20261121}, "'date' must be a string"),
])
def test_a_malformed_file_names_the_key(tmp_path: Path, change: dict[str, object],
                                        message: str) -> None:
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({**GOOD, **change}))
    with pytest.raises(CostModelError, match=message):
        load_calibration(path)


def test_not_json_is_a_precise_error(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    path.write_text("{not json")
    with pytest.raises(CostModelError, match="cannot read the cost calibration"):
        load_calibration(path)


def test_bench_calibrate_writes_the_file_the_cost_model_reads() -> None:
    """``bench/calibrate.py --write`` wrote spmdrules/calibration.json, which nothing reads."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "bench" / "calibrate.py"
    spec = importlib.util.spec_from_file_location("bench_calibrate", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.DEFAULT_OUT == CALIBRATION_FILE
