"""A regular (non-editable) install finds every rule: `rules/` ships as `spmdrules.rules`, never
as a top-level `rules`; from the repository's root, where `rules/` and `spmdrules/` are on
sys.path as folders, the wrong imports are refused with a typed error that names the fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
#: from the repository's root, as in the bug report: before, the rules registered twice
TOP_LEVEL = "import spmdrules, rules"


def _python(code: str, *flags: str, cwd: Path = ROOT, env: dict[str, str] | None = None,
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *flags, "-c", code], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def _refused(run: subprocess.CompletedProcess[str]) -> str:
    """The last line of a run that must fail with the typed error (not a duplicate one)."""
    assert run.returncode == 1, run.stdout + run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("spmdrules.core.errors.RulesImportError: "), run.stderr[-3000:]
    return last


@pytest.mark.parametrize("code", [TOP_LEVEL, "import rules", "import rules.attention",
                                  "import spmdrules.rules, rules.softmax"])
def test_the_rules_folder_imported_as_a_top_level_rules_is_refused_naming_the_fix(
        code: str) -> None:
    """Editable install, from the repository's root (on sys.path as the current directory)."""
    last = _refused(_python(code))
    assert "imported as the top-level package 'rules'" in last
    assert "write `import spmdrules.rules`" in last


def test_python_m_rules_from_the_root_is_refused_and_spmdrules_rules_works() -> None:
    assert "`python -m spmdrules.rules`" in _refused(_python("", "-m", "rules"))
    stats = subprocess.run([sys.executable, "-m", "spmdrules.rules", "--stats"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120, check=True)
    assert stats.stdout.splitlines()[-1].startswith("TOTAL")


def test_after_the_refusal_the_registry_holds_each_rule_once_and_works() -> None:
    """The refusal comes before any family is imported: nothing was registered twice or half."""
    probe = ("import json, sys, spmdrules\n"
             "from spmdrules.core.errors import RulesImportError\n"
             "before = spmdrules.list_rules()\n"
             "try:\n    import rules\nexcept RulesImportError:\n    pass\n"
             "import spmdrules.rules.softmax as s\n"
             "print(json.dumps([before == spmdrules.list_rules(), len(before), s.__name__,\n"
             "                  sorted(m for m in sys.modules if m.split('.')[0] == 'rules')]))")
    run = _python(probe)
    assert run.returncode == 0, run.stderr
    same, count, module, top_level = json.loads(run.stdout)
    assert (same, module, top_level) == (True, "spmdrules.rules.softmax", [])
    assert count >= 139


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
    # The wheel used from the repository's root: the current directory comes first on sys.path
    # and its spmdrules/ folder shadows the install. -S leaves the site directories out (this
    # venv's editable finder with them), as in an environment with the regular install only;
    # the dependencies' folder is put back by hand.
    deps = str(Path(np.__file__).resolve().parents[1])
    regular = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), deps])}
    for code in (TOP_LEVEL, "import spmdrules"):
        last = _refused(_python(code, "-S", env=regular))
        assert f"imported from the source tree {ROOT}," in last
        assert f"pip install -e {ROOT}" in last
    assert _python("import spmdrules.rules", "-S", cwd=tmp_path, env=regular).returncode == 0
    outside = _python(TOP_LEVEL, "-S", cwd=tmp_path, env=regular)
    assert outside.stderr.strip().endswith("No module named 'rules'")  # none ships
