"""An op from outside the package, as its author ships it: the example plugin of docs/plugins.md.

The plugin (``spmdrules_example_op``, installed from ``tests/plugins/spmdrules_example_op``)
registers ``l2_normalize`` with one ``register_op``. Everything that loads it runs in a process
of its own (the commands, the page's example, MPI ranks), as a user's would: the suite's own
process keeps the package's tables as they are, so that the checks over every registered op
(``tests/test_layering.py``) see the package's ops only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import spmdrules as sr
from spmdrules.core.plugins import ENV, GROUP, NO_AUTOLOAD

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "tests" / "plugins" / "spmdrules_example_op"
PAGE = ROOT / "docs" / "plugins.md"
_BLOCK = re.compile(r"^```(python|toml)\n(.*?)^```", re.S | re.M)


def _blocks(lang: str) -> list[str]:
    return [code for kind, code in _BLOCK.findall(PAGE.read_text()) if kind == lang]


def _run(*argv: str, cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 600) -> subprocess.CompletedProcess[str]:
    # as a user's shell: no plugin named, and the installed ones loaded (the suite's own
    # process does not load them, tests/conftest.py)
    full = {k: v for k, v in os.environ.items() if k not in (ENV, NO_AUTOLOAD)}
    return subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**full, **(env or {})})


def test_the_page_shows_the_plugin_s_own_files() -> None:
    module, usage = _blocks("python")
    assert module == (PLUGIN / "spmdrules_example_op" / "__init__.py").read_text()
    assert _blocks("toml") == [(PLUGIN / "pyproject.toml").read_text()]
    assert "sr.load_plugins()" in usage


def test_a_plugin_op_is_one_registration_in_a_file_of_its_own() -> None:
    # the measure of issue 25: one call to one registry (register_op) in a file this short
    code = (PLUGIN / "spmdrules_example_op" / "__init__.py").read_text()
    assert code.count("register_op(") == 1
    assert not re.search(r"register_(rule|described|kernel|vjp|cases)\b|shape_rule\.register", code)
    assert len(code.splitlines()) <= 80


def test_verify_proves_the_plugin_op(example_plugin: str, tmp_path: Path) -> None:
    run = _run("-m", "spmdrules.verify", "--ops", "l2_normalize", "--cases", "20", "--seed", "0",
               "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    op = report["ops"]["l2_normalize"]
    assert (op["family"], op["status"]) == ("l2_normalize", "verified")
    assert op["forward"]["cases"] == op["reverse"]["cases"] == 20
    assert op["forward"]["wrong"] == op["reverse"]["wrong"] == 0


def test_installed_plugins_can_be_left_unloaded(example_plugin: str, tmp_path: Path) -> None:
    argv = ["-m", "spmdrules.verify", "--ops", "l2_normalize", "--cases", "2"]
    off = _run(*argv, cwd=tmp_path, env={NO_AUTOLOAD: "1"})
    assert off.returncode == 2
    assert "no SPMD rule is registered for op 'l2_normalize'" in off.stderr
    named = _run(*argv, "--plugin", example_plugin, cwd=tmp_path, env={NO_AUTOLOAD: "1"})
    assert named.returncode == 0, named.stderr[-3000:]


def test_the_cli_completes_a_model_with_the_plugin_op(example_plugin: str, tmp_path: Path) -> None:
    build = _MODEL.format(path=str(tmp_path / "model.json"))
    made = _run("-c", build, cwd=tmp_path)
    assert made.returncode == 0, made.stderr[-3000:]
    run = _run("-m", "spmdrules.cli", "complete", "model.json", "--table", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    # the normalised axis arrives split on mp: one all-gather before l2_normalize
    assert re.search(r"proj\s+-> norm\s+\[0,1\]\s+\[0,-1\]\s+all-gather\(mp\)", run.stdout), (
        run.stdout)


_MODEL = """
import spmdrules as sr
from spmdrules.graph.exchange import dump
sr.load_plugins()
mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
with sr.Graph() as g:
    x = sr.shard(g.input("x", [8, 16]), mesh, ["dp", None])
    w = sr.shard(g.param("w", [16, 12]), mesh, [None, "mp"])
    y = sr.ops.l2_normalize(sr.ops.matmul(x, w, name="proj"), name="norm")
dump(g, {path!r})
"""


_LOCAL_PLUGIN = '''
import spmdrules as sr
from spmdrules.engine.registry import T

sr.register_op(sr.OpSpec(
    "{name}", inputs=[T("x")], outputs=[T("out")], shape=lambda ctx, args, attrs: (args[0].shape,),
    forward=lambda x: sr.SpmdInfo([x.attr], [x.attr])))
'''


def test_plugin_loads_a_module_that_is_not_installed(tmp_path: Path) -> None:
    (tmp_path / "my_ops.py").write_text(_LOCAL_PLUGIN.format(name="my_identity"))
    check = "import spmdrules as sr; sr.get_rule('my_identity')"
    unknown = _run("-c", check, cwd=tmp_path)
    assert "no SPMD rule is registered for op 'my_identity'" in unknown.stderr
    run = _run("-m", "spmdrules.verify", "--plugin", "my_ops", "--ops", "my_identity",
               "--cases", "2", cwd=tmp_path)
    # known now: verify reaches the op (which has no kernel and no cases to run)
    assert "no SPMD rule" not in run.stderr, run.stderr
    assert re.search(r"my_identity\s+my_identity", run.stdout + run.stderr), run.stdout


def test_the_commands_take_a_plugin_module(tmp_path: Path) -> None:
    (tmp_path / "my_ops.py").write_text(_LOCAL_PLUGIN.format(name="my_identity"))
    build = ("import spmdrules as sr; from spmdrules.graph.exchange import dump; "
             "sr.load_plugins(['my_ops']); mesh = sr.ProcessMesh([0, 1], dim_names=['dp'])\n"
             "with sr.Graph() as g:\n"
             "    x = sr.shard(g.input('x', [4, 6]), mesh, ['dp', None])\n"
             "    sr.ops.my_identity(x, name='same')\n"
             "dump(g, 'model.json')")
    made = _run("-c", build, cwd=tmp_path)
    assert made.returncode == 0, made.stderr[-3000:]
    without = _run("-m", "spmdrules.cli", "complete", "model.json", cwd=tmp_path)
    assert without.returncode == 1
    assert "my_identity" in without.stderr, without.stderr
    run = _run("-m", "spmdrules.cli", "--plugin", "my_ops", "complete", "model.json", "--table",
               cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert re.search(r"same\s.*\[0,-1\]", run.stdout), run.stdout


def test_the_given_plugins_pass_to_the_processes_this_one_starts(tmp_path: Path) -> None:
    (tmp_path / "my_ops.py").write_text(_LOCAL_PLUGIN.format(name="my_identity"))
    code = ("import os, subprocess, sys, spmdrules as sr; sr.load_plugins(['my_ops']); "
            f"print(os.environ[{ENV!r}]); subprocess.run([sys.executable, '-c', "
            "'import spmdrules as sr; sr.load_plugins(); print(sr.get_rule(\"my_identity\"))'], "
            "check=True)")
    run = _run("-c", code, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.splitlines()[0] == "my_ops"
    assert "<Rule my_identity(x)>" in run.stdout


def test_a_plugin_that_takes_a_name_gives_the_duplicate_error(tmp_path: Path) -> None:
    (tmp_path / "clash.py").write_text(_LOCAL_PLUGIN.format(name="relu"))
    run = _run("-m", "spmdrules.verify", "--plugin", "clash", "--ops", "relu", cwd=tmp_path)
    assert run.returncode == 1
    msg = run.stderr
    assert "'relu': a rule is already registered for it, at " in msg, msg
    assert re.search(r"rules/elementwise\.py:\d+; the second registration, at .*clash\.py:\d+ "
                     r"\(plugin plugin module 'clash'\)", msg), msg


_BROKEN_DIST = """Metadata-Version: 2.1
Name: broken-plugin
Version: 0.1
"""


def _broken_distribution(where: Path, value: str) -> None:
    info = where / "broken_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(_BROKEN_DIST)
    (info / "entry_points.txt").write_text(f"[{GROUP}]\nbroken = {value}\n")


@pytest.mark.parametrize(("value", "module_code", "cause"), [
    ("broken_ops", "import numpy\nraise RuntimeError('no GPU here')\n", "RuntimeError: no GPU here"),
    ("missing_ops", None, "ModuleNotFoundError: No module named 'missing_ops'"),
    ("broken_ops:register", "def register():\n    return 1 / 0\n",
     "ZeroDivisionError: division by zero"),
])
def test_a_broken_installed_plugin_is_a_typed_error(tmp_path: Path, value: str,
                                                    module_code: str | None, cause: str) -> None:
    _broken_distribution(tmp_path, value)
    if module_code is not None:
        (tmp_path / "broken_ops.py").write_text(module_code)
    env = {"PYTHONPATH": str(tmp_path)}
    for argv in (["-m", "spmdrules.verify", "--ops", "relu"],
                 ["-m", "spmdrules.cli", "example", "mlp", "-o", "m.json"]):
        run = _run(*argv, cwd=tmp_path, env=env)
        assert run.returncode == 1, (argv, run.stderr)
        assert (f"entry point 'broken' = {value!r} of group 'spmdrules.plugins' (from "
                f"broken-plugin) failed to load: {cause}. Fix the plugin, or uninstall it (pip "
                "uninstall broken-plugin)") in run.stderr, run.stderr
        assert "Traceback" not in run.stderr


def test_a_bad_or_missing_plugin_module_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(sr.PluginError, match="'os; rm' is not a module name"):
        sr.load_plugins(["os; rm"], installed=False)
    with pytest.raises(sr.PluginError, match="plugin module 'no_such_plugin_module' failed to "
                                             "load: ModuleNotFoundError"):
        sr.load_plugins(["no_such_plugin_module"], installed=False)
    assert ENV not in os.environ  # nothing loaded, nothing passed on


@pytest.mark.mpi
def test_the_page_s_example_runs_on_four_ranks(example_plugin: str, tmp_path: Path) -> None:
    # the page's last block (complete, lower, forward and reverse on 4 MPI ranks against numpy),
    # then the plugin's VJP against numerical derivatives of the serial model
    _, usage = _blocks("python")
    check: Any = """
from spmdrules.execution.gradcheck import check_gradients
got = {t: run.values[b] for t, b in grads.grads.items()}
checks = check_gradients(g, feeds, {"loss": 1.0}, got, directions=2, entries=2)
assert max(c.error for c in checks) <= 1e-7, checks
print("checked", sorted(got))
"""
    script = tmp_path / "usage.py"
    script.write_text(usage + check)
    run = _run(str(script), cwd=tmp_path, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().endswith("checked ['w', 'x']"), run.stdout
