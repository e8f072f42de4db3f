"""Error messages are safe to print (issue 23, item 4): a user-supplied string that holds
terminal controls (ANSI escapes, BEL, CR, DEL, C1 controls, bidi overrides) is shown escaped.

The escaping happens in one place, ``SpmdError.__str__``; these tests give hostile strings to each
way in (mesh ids, dim names, tensor and op names, rule names, plan keys, model-file keys, file
names, command-line arguments) and check both the API's ``str(error)`` and the CLI's stderr."""

from __future__ import annotations

import importlib
import json
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import spmdrules as sr
from spmdrules import cli, examples, plan
from spmdrules.core.errors import SpmdError
from spmdrules.graph import exchange, ops
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
#: one of each kind of character a terminal acts on
HOSTILE = "\x1b[31mred\x1b[0m\x07\r\x7f\x9b\u202e\u2066\u200b"
RAW = ("\x1b", "\x07", "\r", "\x7f", "\x9b", "\u202e", "\u2066", "\u200b")
ESCAPED = r"\x1b[31mred\x1b[0m\x07\r\x7f\x9b\u202e\u2066\u200b"


def _clean(text: str) -> None:
    assert not any(c in text for c in RAW), repr(text)


def test_printable_escapes_every_non_printable_character_and_indents_continuation_lines() -> None:
    from spmdrules.core.errors import printable

    assert printable(HOSTILE) == ESCAPED
    assert printable("naïve 名前 a\\b") == "naïve 名前 a\\b"  # printable text is left alone
    assert printable("first\nsecond\r\nthird") == "first\n  second\\r\n  third"
    assert printable("\x1b\ntable", indent="") == "\\x1b\ntable"
    assert printable(printable(HOSTILE)) == printable(HOSTILE)  # a wrapped message is not mangled


def _spmd_error_classes() -> list[type[SpmdError]]:
    for m in pkgutil.walk_packages(sr.__path__, "spmdrules."):
        if not m.name.endswith("__main__"):
            importlib.import_module(m.name)
    seen: list[type[SpmdError]] = []
    todo: list[type[SpmdError]] = [SpmdError]
    while todo:
        cls = todo.pop()
        seen.append(cls)
        todo.extend(c for c in cls.__subclasses__() if c not in seen)
    return seen


def test_no_error_class_bypasses_the_escaping() -> None:
    classes = _spmd_error_classes()
    assert len(classes) > 40  # every module was imported
    own = [c.__qualname__ for c in classes if c is not SpmdError and "__str__" in vars(c)]
    assert own == [], f"these override SpmdError.__str__, which escapes the message: {own}"
    e = sr.UnknownOpError(HOSTILE, [])  # a KeyError too: not quoted, and escaped
    assert str(e).startswith(f"no SPMD rule is registered for op '{ESCAPED}'")


def _mesh_dim() -> Any:
    return MESH.dim_index(HOSTILE)


def _dim_names() -> Any:
    return sr.ProcessMesh([[0, 1]], dim_names=[HOSTILE, HOSTILE])


def _tensor_name() -> Any:
    with Graph("g") as g:
        g.input(HOSTILE, [4])


def _unknown_tensor() -> Any:
    return examples.mlp(MESH).tensor(HOSTILE)


def _op_name() -> Any:
    with Graph("g") as g:
        ops.relu(g.input("x", [4]), name=HOSTILE)


def _rule_name() -> Any:
    return sr.get_rule(HOSTILE)


def _reduce_type() -> Any:
    return sr.DistAttr(MESH, [-1], partial={1: HOSTILE})


def _plan_key() -> Any:
    return plan.apply(examples.mlp(MESH, annotate=False), MESH, {HOSTILE: plan.DataParallel()})


def _file(edit: Callable[[dict[str, Any]], None]) -> Callable[[], Any]:
    def load() -> Any:
        m = json.loads(exchange.dumps(examples.mlp(MESH)))
        edit(m)
        return exchange.loads(json.dumps(m), source=f"model{HOSTILE}.json")
    return load


def _mesh_id(m: dict[str, Any]) -> None:
    m["meshes"][HOSTILE] = m["meshes"].pop("mesh0")


API: dict[str, Callable[[], Any]] = {
    "mesh dim": _mesh_dim,
    "dim names": _dim_names,
    "tensor name": _tensor_name,
    "unknown tensor": _unknown_tensor,
    "op name": _op_name,
    "rule name": _rule_name,
    "reduce type": _reduce_type,
    "plan key": _plan_key,
    "file: mesh id": _file(_mesh_id),
    "file: top-level key": _file(lambda m: m.update({HOSTILE: 1})),
    "file: dim name": _file(lambda m: m["meshes"]["mesh0"]["dim_names"].__setitem__(0, HOSTILE)),
    "file: format": _file(lambda m: m.update(format=HOSTILE)),
    "file: op type": _file(lambda m: m["ops"][0].update(type=HOSTILE)),
    "file: attribute": _file(lambda m: m["ops"][0]["attrs"].update({HOSTILE: 1})),
    "file: annotation mesh": _file(lambda m: m["tensors"][0]["annotation"].update(mesh=HOSTILE)),
}


@pytest.mark.parametrize("case", sorted(API))
def test_the_api_escapes_hostile_strings_in_its_errors(case: str) -> None:
    with pytest.raises(SpmdError) as e:
        API[case]()
    _clean(str(e.value))
    assert "\\x1b" in str(e.value) or case.startswith("file"), str(e.value)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.json"
    exchange.dump(examples.mlp(MESH), path)
    return path


def _bad_model(tmp_path: Path, edit: Callable[[dict[str, Any]], None], name: str) -> str:
    m = json.loads(exchange.dumps(examples.mlp(MESH)))
    edit(m)
    path = tmp_path / name
    path.write_text(json.dumps(m))
    return str(path)


CLI: dict[str, Callable[[Path, Path], list[str]]] = {
    "mesh id in the file": lambda d, m: ["complete", _bad_model(d, _mesh_id, "m.json")],
    "key in the file": lambda d, m: ["complete",
                                     _bad_model(d, lambda x: x.update({HOSTILE: 1}), "m.json")],
    "file name": lambda d, m: ["complete", _bad_model(d, _mesh_id, f"m{HOSTILE}.json")],
    "missing file": lambda d, m: ["complete", str(d / f"{HOSTILE}.json")],
    "tensor to explain": lambda d, m: ["explain", str(m), HOSTILE],
    "extra argument": lambda d, m: ["complete", str(m), HOSTILE],
    "choice": lambda d, m: ["example", HOSTILE, "-o", str(d / "out.json")],
    "import suffix": lambda d, m: ["import", str(d / f"x.{HOSTILE}"), "-o", str(d / "o.json")],
}


@pytest.mark.parametrize("case", sorted(CLI))
def test_the_cli_never_prints_a_terminal_control(case: str, tmp_path: Path, model: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = cli.main(CLI[case](tmp_path, model))
    except SystemExit as e:  # argparse's usage errors
        code = int(str(e.code))
    out, err = capsys.readouterr()
    assert code in (1, 2) and "error: " in err and err.count("\n") <= 2, err
    _clean(out + err)


def test_the_cli_escapes_the_paths_it_reports(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / f"out{HOSTILE}.json"
    assert cli.main(["example", "mlp", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    _clean(printed)
    assert f"wrote {tmp_path}/out{ESCAPED}.json" in printed and exchange.load(out).ops
