"""Explanations, JSON exchange (round trip, schema, untrusted files) and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import spmdrules as sr
from spmdrules import examples, ops
from spmdrules.cli import main
from spmdrules.completion import complete
from spmdrules.completion.explain import chain, explain
from spmdrules.graph.annotate import shard
from spmdrules.graph.annotation import OPEN
from spmdrules.graph.errors import GraphError
from spmdrules.graph.exchange import ExchangeError, dumps, json_schema, load, loads, parse
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
SMALL: dict[str, Any] = {"batch": 4, "seq": 8, "hidden": 32, "heads": 4, "ffn": 64, "vocab": 128}
ROOT = Path(__file__).resolve().parents[2]


# ---- explain -----------------------------------------------------------------------------------
def test_explain_a_partial_output() -> None:
    r = complete(examples.gpt_decoder(1, MESH, **SMALL))
    text = explain(r, "layers.0.out.matmul")
    assert "[Shard(0), Partial()]" in text
    assert "forward via layers.0.out.matmul from layers.0.out.weight" in text
    assert "layers.0.out.weight [1,-1]  <- annotation" in text
    assert "cost:" in text                            # the reduced layout lost on cost
    assert "into layers.0.out.add" in text and "all-reduce(mp)" in text


def test_explain_chain_reaches_an_annotation() -> None:
    r = complete(examples.gpt_decoder(1, MESH, **SMALL))
    hops = chain(r, "layers.0.attn.softmax")
    assert hops[-1].kind == "annotation"
    assert [h.tensor for h in hops][:3] == [
        "layers.0.attn.softmax", "layers.0.attn.scale", "layers.0.attn.scores"]


def test_explain_priority_and_annotation() -> None:
    with Graph("chain") as g:
        x = g.input("x", [8, 16])
        y = ops.relu(x, name="y")
        ops.relu(y, name="z")
    shard(x, MESH, ("dp", None))
    shard(g.tensor("z"), MESH, (None, "dp"), priority=1)
    r = complete(g)
    text = explain(r, "y")
    assert "inferred with priority 1: inferred by the reverse rule of z" in text
    assert "priority: it carried priority 0 (inferred) against 1" in text
    assert "annotated ('dp', None) with priority 0 (closed)" in explain(r, "x")


# ---- exchange ----------------------------------------------------------------------------------
def _mixed_graph() -> Graph:
    with Graph("mixed") as g:
        x = g.input("x", [8, 16])
        w = g.param("w", [16, 32])
        parts = ops.split_with_num(ops.matmul(x, w, name="mm"), num=2, axis=-1, name="sp")
        ops.concat(list(parts), axis=-1, name="cat")
        ops.scale(x, name="half")
    shard(x, MESH, ("dp", OPEN), priority=2)
    shard(w, MESH, [(), ("mp",)], closed=[1])
    shard(g.tensor("half"), MESH, (None, None), partial={"mp": "sum"})
    return g


@pytest.mark.parametrize("make", [
    _mixed_graph,
    lambda: examples.gpt_decoder(2, MESH, **SMALL),
    lambda: examples.mlp(MESH),
])
def test_round_trip_before_and_after_completion(make: Any) -> None:
    g = make()
    assert loads(dumps(g)) == g
    complete(g)
    back = loads(dumps(g))
    assert back == g                                 # attrs and annotations included
    assert dumps(back) == dumps(g)
    assert {t.name: t.attr for t in back.tensors} == {t.name: t.attr for t in g.tensors}


def test_round_trip_across_meshes() -> None:
    s1 = sr.ProcessMesh([[4, 5], [6, 7]], dim_names=["dp", "mp"])
    with Graph("pp") as g:
        x = g.input("x", [8, 16])
        y = ops.relu(x, name="y")
    shard(x, MESH, ("dp", None))
    shard(y, s1, ("dp", None))
    complete(g)
    text = dumps(g)
    assert set(json.loads(text)["meshes"]) == {"mesh0", "mesh1"}
    assert loads(text) == g


def test_published_schema_is_current() -> None:
    published = json.loads((ROOT / "docs" / "model.schema.json").read_text())
    assert published == json.loads(json.dumps(json_schema()))


def _doc() -> dict[str, Any]:
    return json.loads(dumps(examples.mlp(MESH, batch=2, seq=4, hidden=8, ffn=16)))


def _t(d: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in d["tensors"] if t["name"] == name)


@pytest.mark.parametrize(("mutate", "message", "cause"), [
    (lambda d: d.update(format="other/9"), "format is 'other/9'", None),
    (lambda d: _t(d, "x").update(shape=[2, "4", 8]), "].shape[1]: Input should be a valid", None),
    (lambda d: _t(d, "x").update(colour="red"), "].colour: Extra inputs", None),
    (lambda d: d["ops"][0].update(type="matmull"), "op 'fc1.matmul': unknown op type 'matmull'",
     GraphError),
    (lambda d: d["ops"][0].update(operands=["x"]), "op 'fc1.matmul'", GraphError),
    (lambda d: _t(d, "x")["annotation"].update(mesh="nope"), "mesh 'nope' is not defined", None),
    (lambda d: _t(d, "x")["annotation"].update(dims=[[0], [0], None]),
     "mesh dim 'dp' splits both tensor dim 0 and tensor dim 1", GraphError),
    (lambda d: d["meshes"]["mesh0"].update(process_ids=[0, 1]), "holds 8 processes", None),
    (lambda d: _t(d, "x")["annotation"].update(partial={"1": "mean"}), "].annotation.partial.1",
     None),
    (lambda d: d["ops"][0].update(attrs={"trans_x": "__import__('os')"}),
     "attribute 'trans_x' must be a bool", GraphError),
    # a value tensor is made by its producer, then checked against the file: listed results
    # whose shape or dtype disagree, or that no op produces, fail as when declared first
    (lambda d: _t(d, "gelu").update(shape=[2, 4, 17]),
     "op 'gelu': result 'gelu' was declared [2, 4, 17] float32 but the op produces [2, 4, 16]",
     GraphError),
    (lambda d: _t(d, "gelu").update(dtype="float33"), "tensor 'gelu': dtype 'float33'",
     GraphError),
    (lambda d: d["ops"].reverse() or _t(d, "gelu").update(shape=[2, 4, 17]),  # read first
     "op 'fc2.matmul' (matmul): y: contracted dim has size 16 but x's has size 17", GraphError),
    (lambda d: d["tensors"].append({**_t(d, "gelu"), "name": "spare"}),
     "tensor 'spare' was declared but no op produces it", GraphError),
    (lambda d: d["tensors"].append(_t(d, "gelu")), "tensor 'gelu' already exists", GraphError),
    (lambda d: d["tensors"].append({**_t(d, "gelu"), "role": "param"}),
     "tensor 'gelu' already exists", GraphError),
])
def test_untrusted_files_fail_precisely(mutate: Any, message: str, cause: type | None) -> None:
    d = _doc()
    mutate(d)
    with pytest.raises(ExchangeError) as info:
        loads(json.dumps(d), "m.json")
    assert message in str(info.value)
    assert str(info.value).startswith("m.json: ")
    if cause is not None:
        assert isinstance(info.value.__cause__, cause)


@pytest.mark.parametrize("order", ["reversed", "rotated"])
def test_a_file_loads_whatever_the_order_of_its_ops(order: str) -> None:
    """Value tensors read before their producer in the file are declared, the others come from
    their producers: any order of ops gives the same graph."""
    g = examples.gpt_decoder(2, MESH, **SMALL)
    d = json.loads(dumps(g))
    d["ops"] = d["ops"][::-1] if order == "reversed" else d["ops"][7:] + d["ops"][:7]
    assert loads(json.dumps(d)) == g


def test_not_json_and_not_an_object() -> None:
    with pytest.raises(ExchangeError, match="not valid JSON"):
        parse("{'python': True}")
    with pytest.raises(ExchangeError, match="must be a JSON object"):
        parse("[1, 2]")
    with pytest.raises(ExchangeError, match="cannot read the model file"):
        load("/nonexistent/model.json")


# ---- CLI ---------------------------------------------------------------------------------------
def test_cli_complete_and_explain(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "gpt.json"
    out = tmp_path / "done.json"
    assert main(["example", "gpt", "--layers", "1", "-o", str(model)]) == 0
    assert main(["complete", str(model), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "reshards 3" in text and "all-reduce(mp)" in text
    done = load(out)
    assert done.tensor("layers.0.attn.softmax").attr == sr.DistAttr(MESH, [0, 1, -1, -1])
    assert main(["explain", str(model), "layers.0.fc2.matmul"]) == 0
    assert "into layers.0.fc2.add" in capsys.readouterr().out


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "mlp.json"
    assert main(["example", "mlp", "-o", str(model)]) == 0
    assert main(["explain", str(model), "gleu"]) == 1
    assert "did you mean 'gelu'" in capsys.readouterr().err
    assert main(["complete", str(tmp_path / "missing.json")]) == 1
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["complete", str(bad)]) == 1
    assert "not valid JSON" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["complete"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    assert "complete" in capsys.readouterr().out


def test_console_script_entry_point() -> None:
    done = subprocess.run([sys.executable, "-m", "spmdrules.cli", "--help"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "explain" in done.stdout
