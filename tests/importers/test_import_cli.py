"""``spmdrules import SOURCE -o OUT.json``: a torch.export .pt2 file into the exchange format."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")

from spmdrules.cli import main  # noqa: E402
from spmdrules.graph.exchange import load  # noqa: E402
from spmdrules.importers import torch as torch_import  # noqa: E402


def test_a_pt2_file_becomes_a_model_file(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x = torch.randn(3, 4)
    src = tmp_path / "mlp.pt2"
    torch.export.save(torch.export.export(m, (x,)), str(src))
    out = tmp_path / "mlp.json"
    assert main(["import", str(src), "-o", str(out)]) == 0
    assert load(out) == torch_import.load(m, (x,), name="mlp")
    assert main(["import", str(tmp_path / "model.tflite"), "-o", str(out)]) == 1
    assert "no importer reads '.tflite' files; the readable suffixes are .onnx, .pt2" in (
        capsys.readouterr().err)
