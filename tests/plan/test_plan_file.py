"""A plan as a JSON file (``spmdrules.plan.file``, ``docs/plan.schema.json``) and
``spmdrules import MODEL --plan PLAN.json`` (issue 26, item 6)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import spmdrules as sr
from spmdrules import plan
from spmdrules.cli import main
from spmdrules.graph import examples
from spmdrules.graph.annotation import OPEN
from spmdrules.graph.exchange import load
from spmdrules.plan import file as plan_file
from spmdrules.plan.file import PlanFileError

ROOT = Path(__file__).resolve().parents[2]
MESH = {"shape": [2, 2], "process_ids": [0, 1, 2, 3], "dim_names": ["dp", "mp"]}


def _doc(entries: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"format": "spmdrules.plan/1", "mesh": MESH, "plan": entries, **more}


def test_the_published_schema_is_current() -> None:
    published = json.loads((ROOT / "docs" / "plan.schema.json").read_text())
    assert published == json.loads(json.dumps(plan_file.json_schema()))


def test_the_example_in_the_docs_is_a_valid_plan_file() -> None:
    text = (ROOT / "docs" / "importers.md").read_text()
    [block] = re.findall(r"^```json\n(.*?)^```", text, re.S | re.M)
    mesh, entries = plan_file.parse(block)
    assert mesh.dim_names == ("dp", "mp") and len(entries) == 7


def test_every_style_and_option_reads_as_the_python_plan() -> None:
    mesh, got = plan_file.parse(json.dumps(_doc({
        "x": {"style": "DataParallel", "dim": "dp", "batch_dim": 0},
        "*.qkv": {"style": "ColwiseParallel", "chunks": [2, 1, 1]},
        "fc1": {"style": "ColwiseParallel", "dim": 1, "chunks": 3},
        "fc2": {"style": "RowwiseParallel"},
        "embed": {"style": "VocabParallel", "dim": "mp"},
        "norm": {"style": "SequenceParallel", "sequence_dim": 2},
        "img": {"style": "Spatial", "dims": {"H": "mp"}, "layout": "NHWC"},
        "h": {"style": "Spec", "dims": ["dp", None, "?", ["dp", "mp"]],
              "partial": {"mp": "sum"}, "closed": False}})))
    assert mesh == sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
    assert got["x"] == plan.DataParallel("dp", 0)
    assert got["*.qkv"] == plan.ColwiseParallel(chunks=(2, 1, 1))
    assert got["fc1"] == plan.ColwiseParallel(1, 3)
    assert got["fc2"] == plan.RowwiseParallel()
    assert got["embed"] == plan.VocabParallel()
    assert got["norm"] == plan.SequenceParallel(sequence_dim=2)
    assert got["img"] == plan.Spatial({"H": "mp"}, "NHWC")
    spec = got["h"]
    assert isinstance(spec, plan.Spec)
    assert (spec.spec, spec.partial, spec.closed) == (
        ("dp", None, OPEN, ("dp", "mp")), {"mp": "sum"}, False)


@pytest.mark.parametrize(("doc", "message"), [
    ("{", "not valid JSON"),
    ("[1, 2]", "the file: Input should be"),
    (json.dumps(_doc({}, format="spmdrules.plan/2")), "format is 'spmdrules.plan/2'"),
    (json.dumps({**_doc({}), "extra": 1}), "extra: Extra inputs are not permitted"),
    (json.dumps(_doc({"fc1": {"style": "Colwise"}})), "plan.fc1: Input tag 'Colwise'"),
    (json.dumps(_doc({"fc1": {"style": "ColwiseParallel", "dimm": "mp"}})),
     "plan.fc1.ColwiseParallel.dimm: Extra inputs"),
    (json.dumps(_doc({"fc1": {"style": "ColwiseParallel", "chunks": [2, 0]}})),
     "chunks"),
    (json.dumps(_doc({"fc1": {"style": "DataParallel", "batch_dim": "0"}})),
     "batch_dim: Input should be a valid integer"),
    (json.dumps(_doc({"x\x1b[31m": {"style": "DataParallel"}})), "String should match pattern"),
    (json.dumps(_doc({"h": {"style": "Spec", "dims": [None], "partial": {"mp": "mean"}}})),
     "partial.mp: Input should be 'sum'"),
    (json.dumps({**_doc({}), "mesh": {**MESH, "process_ids": [0, 1, 2]}}),
     "mesh: ProcessMesh: shape [2, 2] holds 4 processes but 3 ids were given"),
    (json.dumps({**_doc({}), "mesh": {**MESH, "process_ids": [0, 1, 1, 2]}}),
     "appear more than once"),
    ("[" * 100000, "not valid JSON"),
])
def test_a_bad_plan_file_is_a_plan_file_error_naming_the_field(doc: str, message: str) -> None:
    with pytest.raises(PlanFileError) as info:
        plan_file.parse(doc, "p.json")
    assert isinstance(info.value, plan.PlanError)
    assert message in str(info.value)


def test_apply_from_a_file_equals_the_python_plan(tmp_path: Path) -> None:
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
    entries = {"x": {"style": "DataParallel"}, "fc1": {"style": "ColwiseParallel"},
               "fc2": {"style": "RowwiseParallel"}}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_doc(entries)))
    g = examples.mlp(mesh, batch=4, seq=8, hidden=16, ffn=32, annotate=False)
    want = examples.mlp(mesh, batch=4, seq=8, hidden=16, ffn=32, annotate=False)
    plan.apply(g, *plan_file.load(path))
    plan.apply(want, mesh, {"x": plan.DataParallel(), "fc1": plan.ColwiseParallel(),
                            "fc2": plan.RowwiseParallel()})
    assert g == want
    assert {t.name: t.annotation for t in g.tensors} == {
        t.name: t.annotation for t in want.tensors}


torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")


def _pt2(tmp_path: Path) -> Path:
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    src = tmp_path / "mlp.pt2"
    torch.export.save(torch.export.export(m, (torch.randn(4, 4),)), str(src))
    return src


def test_import_applies_a_plan_file_and_the_model_completes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI could not apply a plan: an imported JSON was completed only after editing its
    annotations by hand."""
    src, out, p = _pt2(tmp_path), tmp_path / "out.json", tmp_path / "plan.json"
    p.write_text(json.dumps(_doc({"input": {"style": "DataParallel"},
                                  "0": {"style": "ColwiseParallel"},
                                  "2": {"style": "RowwiseParallel"}})))
    assert main(["import", str(src), "--plan", str(p), "-o", str(out)]) == 0
    assert "3 plan entries annotated 5 tensors" in capsys.readouterr().out
    g = load(out)
    ann = g.tensor("0.weight").annotation
    assert ann is not None and ann.attr.dims_mapping == (1, -1)
    assert main(["complete", str(out), "-o", str(out)]) == 0
    done = load(out)
    assert done.tensor("0.weight").attr.dims_mapping == (1, -1)
    assert done.tensor("input").attr.dims_mapping == (0, -1)


@pytest.mark.parametrize(("entries", "message"), [
    ({"decoder.*": {"style": "ColwiseParallel"}}, "plan entry 'decoder.*': ColwiseParallel("
                                                   "dim='mp') matches no module of graph 'mlp'"),
    ({"input": {"style": "RowwiseParallel"}}, "plan entry 'input': RowwiseParallel(dim='mp') "
                                              "matches no module"),
    ({"0": {"style": "ColwiseParallel", "dim": "tp"}}, "names mesh dim 'tp', which the mesh "
                                                       "does not have; did you mean 'mp'"),
])
def test_a_plan_that_does_not_fit_the_model_is_the_plan_packages_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], entries: dict[str, Any],
        message: str) -> None:
    src, out, p = _pt2(tmp_path), tmp_path / "out.json", tmp_path / "plan.json"
    p.write_text(json.dumps(_doc(entries)))
    assert main(["import", str(src), "--plan", str(p), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("spmdrules: error: ") and err.count("\n") == 1
    assert not out.exists()
    assert message in err


def test_a_bad_plan_file_fails_before_the_import(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "plan.json"
    p.write_text('{"format": "spmdrules.plan/1"}')
    assert main(["import", str(tmp_path / "absent.pt2"), "--plan", str(p), "-o",
                 str(tmp_path / "o.json")]) == 1
    assert "plan.json: mesh: Field required" in capsys.readouterr().err
    assert main(["import", str(tmp_path / "absent.pt2"), "--plan", str(tmp_path / "none.json"),
                 "-o", str(tmp_path / "o.json")]) == 1
    assert "cannot read the plan file" in capsys.readouterr().err
