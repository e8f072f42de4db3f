"""Hostile model files (issue 16): every bad input is one line ``spmdrules: error: ...`` and exit
status 1 from the CLI, never a traceback, and an ``ExchangeError`` from the loader."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from spmdrules import cli, examples
from spmdrules.core import output
from spmdrules.core.mesh import ProcessMesh
from spmdrules.graph import exchange
from spmdrules.graph.exchange import ExchangeError

MESH = ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
Edit = Callable[[dict[str, Any]], Any]


def _model() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(exchange.dumps(examples.mlp(MESH)))
    return data


def _set(path: list[Any], value: Any) -> Edit:
    def edit(m: dict[str, Any]) -> Any:
        node: Any = m
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        return m
    return edit


def _text(edit: Edit) -> str:
    out = edit(_model())
    return out if isinstance(out, str) else json.dumps(out)


def _nested(depth: int) -> Any:
    v: Any = 0
    for _ in range(depth):
        v = [v]
    return v


def _deep_attrs(m: dict[str, Any]) -> str:
    m["ops"][0]["attrs"]["deep"] = "@@"
    return json.dumps(m).replace('"@@"', "[" * 5000 + "0" + "]" * 5000)


def _huge_int(m: dict[str, Any]) -> str:
    m["tensors"][0]["annotation"]["priority"] = "@@"
    return json.dumps(m).replace('"@@"', "9" * 5000)


HOSTILE: dict[str, Edit] = {
    "nested 100,000 deep": lambda m: "[" * 100_000 + "]" * 100_000,
    "nested 5,000 deep in attrs": _deep_attrs,
    "an integer of 5,000 digits": _huge_int,
    "process id 10^30": _set(["meshes", "mesh0", "process_ids", 0], 10**30),
    "a float attribute as 10^400": lambda m: _set(["ops", 0, "attrs", "x"], 10**400)(m),
    "partial key superscript one": _set(["tensors", 0, "attr", "partial"], {"¹": "sum"}),
    "partial key arabic one": _set(["tensors", 0, "attr", "partial"], {"١": "sum"}),
    "dim 10^310 with a reshard": _set(["tensors", 0, "shape"], [10**310]),
    "a name with a newline": _set(["tensors", 0, "name"], "x\n"),
    "a mesh dim name with terminal escapes": _set(["meshes", "mesh0", "dim_names", 1],
                                                  "\x1b[41mmp\x1b[0m"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_file_is_one_line_and_status_1(case: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    text = _text(HOSTILE[case])
    with pytest.raises(ExchangeError):
        exchange.loads(text)
    path = tmp_path / "model.json"
    path.write_text(text)
    assert cli.main(["complete", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("spmdrules: error: ") and err.count("\n") == 1, err[:500]
    assert "\x1b" not in err and "Traceback" not in err


def test_output_is_replaced_only_when_the_write_succeeds(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out.json"
    out.write_text("the previous file")

    def fail(*_: Any, **__: Any) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(output.os, "replace", fail)  # the write fails at its last step
    with pytest.raises(OSError):
        exchange.dump(examples.mlp(MESH), out)
    assert out.read_text() == "the previous file"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
    monkeypatch.undo()
    exchange.dump(examples.mlp(MESH), out)
    assert exchange.load(out) == examples.mlp(MESH)
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
