"""Every unmapped op of a model at once (torch and ONNX, the API and ``import --check``), each
with its count, its nodes and the rule family that serves a similar computation; custom
namespaces and domains kept in the names (issue 26, item 5)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")
onnx = pytest.importorskip("onnx", reason="needs the onnx extra (make test installs it)")
from onnx import TensorProto, helper  # noqa: E402
from torch import nn  # noqa: E402

import spmdrules as sr  # noqa: E402
from spmdrules.cli import main  # noqa: E402
from spmdrules.importers import families, sources  # noqa: E402
from spmdrules.importers import onnx as onnx_import  # noqa: E402
from spmdrules.importers import torch as torch_import  # noqa: E402
from spmdrules.importers.errors import UnmappedOpError  # noqa: E402
from spmdrules.importers.unmapped import UnmappedOpsError  # noqa: E402


@torch.library.custom_op("spmdrules_test::rms_norm_rope", mutates_args=())
def rms_norm_rope(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


@rms_norm_rope.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Block(nn.Module):
    """Five kinds of unmapped node: a custom op, two ops without a converter (a median with
    its indices, a cumulative product), a pointwise op
    without one, and an ``addmm`` whose converter refuses ``beta``; the addmm and the add read
    the results of unmapped nodes."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        y = rms_norm_rope(self.proj(x))
        z = y * torch.median(y, 1, keepdim=True).values
        return torch.cumprod(z, 0) + torch.atan2(z, z) + torch.addmm(z, z, self.w, beta=2.0)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block(), Block()])

    def forward(self, x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, i)
        return x


ARGS = (torch.randn(3, 4), torch.zeros(3, 4, dtype=torch.long))
#: the median nodes torch.export names in the three blocks
MEDIAN_NODES = ["layers.0.median", "layers.1.median_1", "layers.2.median_2"]


def test_every_unmapped_torch_op_is_reported_at_once() -> None:
    """Import stopped at the first unmapped op (the custom op, named aten.rms_norm_rope)."""
    with pytest.raises(UnmappedOpsError) as info:
        torch_import.load(Model(), ARGS)
    err = info.value
    assert isinstance(err, UnmappedOpError) and isinstance(err, sr.SpmdError)
    assert err.report.counts() == {
        "spmdrules_test.rms_norm_rope.default": 3, "aten.median.dim": 3,
        "aten.cumprod.default": 3, "aten.atan2.default": 3, "aten.addmm.default": 3}
    assert (err.node, err.op) == ("layers.0.rms_norm_rope", "spmdrules_test.rms_norm_rope.default")
    medians = [u.node for u in err.report.by_op()["aten.median.dim"]]
    assert medians == MEDIAN_NODES
    text = str(err)
    assert "aten.rms_norm_rope" not in text
    assert "5 op(s) in 15 node(s)" in text
    assert "beta" in text  # a refusing converter, tried on stand-ins
    for line in ("the norm family (rules/norm.py) serves a similar computation: fused_rms_norm",
                 "the reduction family (rules/reduction.py) serves a similar computation: mean",
                 "the cumulative family (rules/cumulative.py)",
                 "the elementwise family (rules/elementwise.py)",
                 "why: beta=2.0, alpha=1: only beta = alpha = 1 is mapped"):
        assert line in text


def test_a_single_unmapped_node_keeps_its_own_message() -> None:
    class One(nn.Module):
        def forward(self, x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
            return torch.median(x, 1).values

    with pytest.raises(UnmappedOpsError, match=r"^node 'median': op aten\.median\.dim cannot "
                                               r"be mapped .* the reduction family") as info:
        torch_import.load(One(), ARGS)
    assert info.value.nearest[:1] == ["mean"] and info.value.family == "reduction"


@pytest.mark.parametrize(("op", "family", "first"), [
    ("aten.gather.default", "gather", "gather"),
    ("aten.convolution.default", "conv", "conv2d"),
    ("ConvTranspose", "conv", "conv2d_transpose"),
    ("aten.max_pool2d_with_indices.default", "pool", "pool2d"),
    ("aten._native_batch_norm_legit_no_training.default", "channel_norm", "batch_norm"),
    ("aten.scaled_dot_product_attention.default", "attention", "flash_attention"),
    ("aten.index_put.default", "scatter", "index_put"),
    ("ReduceMean", "reduction", "mean"),
    ("GatherElements", "gather", "gather_nd"),
    ("com.example.LayerNormalization", "norm", "layer_norm"),
    ("mylib::rms_norm_rope", "norm", "fused_rms_norm"),
])
def test_suggestions_are_the_family_that_serves_the_computation(op: str, family: str,
                                                                first: str) -> None:
    """By spelling, gather suggested where/gt/ge and convolution contiguous/dropout."""
    fam, ops = families.suggest(op)
    assert fam == family and first in ops


def test_what_no_family_serves_gets_no_made_up_suggestion() -> None:
    for op in ("aten.histc.default", "aten._grouped_mm.default", "Resize"):
        assert families.suggest(op) == (None, [])
    assert "no rule family serves it" in families.describe("aten.histc.default")
    # a category of the source framework, then the mapped ops of the same arguments
    assert families.family_of("atan2", ["pointwise"]) == "elementwise"
    assert families.family_of("cumprod", like=["softmax", "cumsum", "log_softmax"]) == "cumulative"


def _onnx_model() -> Any:
    """Hardmax (no converter) twice, one op of a custom domain, and a Relu reading
    an unmapped result (it has a converter, so it is counted as not tried)."""
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Hardmax", ["x"], ["h"], name="hard"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("FusedGelu", ["x"], ["g"], name="gelu", domain="com.example"),
             helper.make_node("Hardmax", ["x"], ["h2"], name="hard2"),
             helper.make_node("Add", ["r", "g"], ["s"], name="add"),
             helper.make_node("Add", ["s", "h2"], ["y"], name="out")]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", f, [2, 3])],
                          [helper.make_tensor_value_info("y", f, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13),
                                               helper.make_opsetid("com.example", 1)])


def test_every_unmapped_onnx_op_is_reported_at_once() -> None:
    """The ONNX importer stopped at the first one too, and named a custom domain's op without
    its domain's converter table."""
    with pytest.raises(UnmappedOpsError) as info:
        onnx_import.load(_onnx_model())
    report = info.value.report
    assert report.counts() == {"Hardmax": 2, "com.example.FusedGelu": 1}
    assert report.untried == ["relu", "add", "out"]
    text = str(info.value)
    assert "Hardmax x2: hard, hard2" in text
    assert "no converter is registered for domain 'com.example'" in text
    assert "3 node(s) with a converter read an unmapped result and were not tried" in text


def test_import_check_lists_every_unmapped_op_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "blocks.pt2"
    torch.export.save(torch.export.export(Model(), ARGS), str(src))
    assert main(["import", str(src), "--check"]) == 1
    out = capsys.readouterr().out
    assert "blocks: 5 op(s) in 15 node(s) cannot be mapped" in out
    assert "spmdrules_test.rms_norm_rope.default x3: layers.0.rms_norm_rope" in out
    assert sources.check(src).counts()["aten.atan2.default"] == 3
    assert list(tmp_path.iterdir()) == [src]

    onnx_path = tmp_path / "m.onnx"
    onnx.save(_onnx_model(), str(onnx_path))
    assert main(["import", str(onnx_path), "--check"]) == 1
    assert "com.example.FusedGelu x1: gelu" in capsys.readouterr().out

    fine = tmp_path / "mlp.pt2"
    mlp = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    torch.export.save(torch.export.export(mlp, (torch.randn(2, 4),)), str(fine))
    assert main(["import", str(fine), "--check"]) == 0
    assert "mlp: every op maps onto a registered op" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocks.pt2", "m.onnx", "mlp.pt2"]


def test_check_and_output_are_exclusive(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["import", str(tmp_path / "m.pt2"), "--check", "-o", str(tmp_path / "o.json")])
    assert info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_custom_op_this_process_does_not_register_is_named_with_the_fix(
        tmp_path: Path) -> None:
    """torch's reader failed deep in its deserializer on the first such node, with a traceback
    of several hundred lines in the message."""
    src = tmp_path / "blocks.pt2"
    torch.export.save(torch.export.export(Model(), ARGS), str(src))
    run = subprocess.run([sys.executable, "-m", "spmdrules.cli", "import", str(src), "--check"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [
        "spmdrules: error: blocks.pt2: the program calls spmdrules_test::rms_norm_rope (3 nodes),"
        " which no library in this process registers; import the library that defines it (its "
        "torch.library registration) before reading the file, and map it with a converter "
        "(docs/importers.md, 'Converters from user code')"]
