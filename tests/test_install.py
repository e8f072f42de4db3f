"""A regular (non-editable) install finds every rule: `rules/` ships as `spmdrules.rules`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(600)
def test_wheel_install_registers_every_rule(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=500,
    )
    (wheel,) = wheels.glob("spmdrules-*.whl")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert not (target / "rules").exists(), "rules/ must not be installed as a top-level package"
    probe = (
        "import json, spmdrules, spmdrules.rules as r, spmdrules.completion.cost as c; "
        "print(json.dumps([spmdrules.__file__, r.__file__, spmdrules.list_rules(), "
        "str(c.CALIBRATION_FILE)]))"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    pkg_file, rules_file, names, calibration = json.loads(out.stdout)
    assert pkg_file.startswith(str(target)) and rules_file.startswith(str(target))
    # the default cost model's measurements ship with the package
    assert calibration.startswith(str(target)) and Path(calibration).is_file()
    # The reference is a fresh interpreter on the development install (this process's registry
    # may hold rules that other tests registered).
    dev = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert names == json.loads(dev.stdout)[2]
    assert len(names) >= 139
