"""The torch importer: names, the ops it maps (checked against torch's own forward), constant
sources, and the typed errors for what it cannot represent."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")

from spmdrules.execution.executor import run_serial  # noqa: E402
from spmdrules.importers import aten_sort, aten_windows  # noqa: E402, F401 (register converters)
from spmdrules.importers import torch as torch_import  # noqa: E402
from spmdrules.importers.aten import ATEN  # noqa: E402
from spmdrules.importers.errors import (  # noqa: E402
    ControlFlowError,
    DynamicShapeError,
    ImporterError,
    InPlaceMutationError,
    UnmappedOpError,
    UnsupportedDtypeError,
)

nn = torch.nn


class Block(nn.Module):
    """Many mapped ops at once: linear, layer norm, gelu, slicing with a step, cat,
    where on a mask from arange, cumsum, index, split, mean, rsqrt, softmax, a lifted constant."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 12)
        self.norm = nn.LayerNorm(12)
        self.inner = nn.Sequential(nn.Linear(12, 6, bias=False))
        self.register_buffer("offset", torch.linspace(-1.0, 1.0, 6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.gelu(self.norm(self.proj(x)), approximate="tanh")
        a, b, c = h.split([4, 4, 4], dim=-1)
        h = torch.cat([c, a * b, h[..., ::3]], dim=-1)
        y = self.inner(h) + self.offset
        pos = torch.arange(y.shape[1])
        mask = pos[None, :, None] <= pos[None, None, :].cumsum(-1)[..., :1]
        y = torch.where(mask, y, torch.full_like(y, -2.0))
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)
        rows = torch.tensor([1, 0])
        return torch.softmax(y[rows], dim=-1) + torch.tensor(0.5)


def test_names_keep_module_paths_and_values_equal_torch() -> None:
    torch.manual_seed(0)
    m = Block().eval()
    x = torch.randn(2, 5, 8)
    imp = torch_import.export(m, (x,))
    g = imp.graph
    params = {t.name for t in g.params}
    assert {"proj.weight", "proj.bias", "norm.weight", "norm.bias", "inner.0.weight",
            "offset"} <= params
    assert any(n.startswith("constant.") for n in params)  # the lifted tensor constants
    assert imp.inputs == ["x"] and imp.outputs == ["output"]
    assert g.op("proj.linear.mm").type == "matmul"  # ops named <module path>.<node>
    types = Counter(op.type for op in g.ops)
    assert {"matmul", "layer_norm", "gelu", "split", "concat", "strided_slice", "arange", "full",
            "cumsum", "where", "index_select", "rsqrt", "softmax"} <= set(types)
    got = run_serial(g, imp.feeds(x))[imp.outputs[0]]
    np.testing.assert_allclose(got, m(x).detach().numpy(), rtol=1e-5, atol=1e-6)


class Attention(nn.Module):
    """Batched matmuls as models write them: a 3-D linear, a 4-D matmul, an einsum."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        s = torch.matmul(q, k.transpose(-1, -2))  # [b, h, s, s]
        c = torch.einsum("bhst,bhtd->bhsd", s.softmax(-1), k)
        return self.proj(c.transpose(1, 2).reshape(2, 5, 8))


def test_matmul_and_linear_are_kept_whole_and_einsum_still_imports() -> None:
    torch.manual_seed(0)
    m = Attention().eval()
    q, k = torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4)
    core = torch_import.decompose_program(torch.export.export(m, (q, k)))
    targets = {str(n.target) for n in core.graph.nodes if n.op == "call_function"}
    assert {"aten.matmul.default", "aten.linear.default"} <= targets
    imp = torch_import.export(m, (q, k))
    g = imp.graph
    # the 4-D matmul on [b, h, s, d] as it is, not bmm on a [b * h, s, d] view; the linear on
    # [b, s, hidden] with its weight as it is (trans_y), not mm on [b * s, hidden]
    (scores,) = [op for op in g.ops if op.type == "matmul" and op.inputs[0].ndim == 4]
    assert scores.inputs[0].name == "q" and scores.outputs[0].shape == (2, 2, 5, 5)
    (proj,) = [op for op in g.ops if op.name.startswith("proj.") and op.type == "matmul"]
    assert proj.inputs[0].ndim == 3 and proj.inputs[1].name == "proj.weight"
    assert proj.attr("trans_y") is True
    assert [op.type for op in g.ops].count("bmm") == 1  # einsum is decomposed, onto bmm
    got = run_serial(g, imp.feeds(q, k))[imp.outputs[0]]
    np.testing.assert_allclose(got, m(q, k).detach().numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ImporterError, match="ExportedProgram, got Attention; export the module"):
        torch_import.decompose_program(m)


def test_load_gives_the_graph_and_training_ir_maps_too() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 6), nn.SiLU(), nn.Linear(6, 3), nn.Softmax(dim=-1)).eval()
    x = torch.randn(3, 4)
    g = torch_import.load(m, (x,))
    assert {t.name for t in g.params} == {"0.weight", "0.bias", "2.weight", "2.bias"}
    imp = torch_import.export(m, (x,), decompose=False)  # linear, silu, softmax.int
    assert "matmul" in {op.type for op in imp.graph.ops}
    got = run_serial(imp.graph, imp.feeds(x))[imp.outputs[0]]
    np.testing.assert_allclose(got, m(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_an_unmapped_op_names_the_node_the_op_and_the_family_that_serves_it() -> None:
    """The suggestion was the mapped ops closest by spelling; it is the family of cumsum, the
    mapped op of cumprod's arguments (tests/importers/test_unmapped.py has the rest)."""
    class Prod(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cumprod(x, dim=0)

    with pytest.raises(UnmappedOpError, match=r"node 'cumprod': op aten\.cumprod\.default .*"
                                              r"the cumulative family .*: cummax, cummin, cumsum"):
        torch_import.load(Prod(), (torch.randn(4),))


def test_dynamic_shapes_are_refused_naming_the_node() -> None:
    m = nn.Linear(4, 4)
    batch = torch.export.Dim("batch", min=2)
    ep = torch.export.export(m, (torch.randn(3, 4),), dynamic_shapes=({0: batch},))
    with pytest.raises(DynamicShapeError, match=r"node 'input': shape .* is symbolic"):
        torch_import.from_exported(ep)


def test_an_unsupported_dtype_names_the_node() -> None:
    """complex64 was an UnmappedOpError of a node named '<dtype>'."""
    with pytest.raises(UnsupportedDtypeError, match=r"^node 'input': torch dtype complex64 has no "
                       "spmdrules dtype; the supported dtypes are bfloat16, bool"):
        torch_import.load(nn.Identity(), (torch.ones(2, 3, dtype=torch.complex64),))


def test_control_flow_is_refused_naming_the_node() -> None:
    class Branch(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cond(x.sum() > 0, lambda t: t + 1, lambda t: t - 1, (x,))

    with pytest.raises(ControlFlowError, match="node 'cond'"):
        torch_import.load(Branch(), (torch.randn(3),))


def test_a_buffer_written_in_place_is_a_source_and_its_new_value_an_update() -> None:
    """The functional program torch.export gives returns a written buffer's new value (a
    training batch norm's running statistics): the buffer stays a source with its value before
    the call, and the new value is the output ``<buffer>.updated``."""
    class Counter_(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("seen", torch.ones(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.seen.add_(x)
            return x * 2

    x = torch.randn(3)
    im = torch_import.export(Counter_(), (x,))
    assert im.updates == {"seen": "seen.updated"} and im.outputs == ["output"]
    values = run_serial(im.graph, im.feeds(x))
    np.testing.assert_array_equal(values["seen.updated"], 1 + x.numpy())
    np.testing.assert_array_equal(values["output"], 2 * x.numpy())


def test_in_place_mutation_of_an_input_or_a_parameter_is_refused_naming_it() -> None:
    class Writes(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.zeros(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x.mul_(2)
            return x + self.w

    with pytest.raises(InPlaceMutationError, match="writes into user 'x' in place"):
        torch_import.load(Writes(), (torch.randn(3),))


def test_every_mapped_name_is_an_aten_overload() -> None:
    """Every ``packet.overload`` name is an ATen overload; a name with a namespace of its own
    (``transformers.grouped_mm_fallback.default``) is a library's op, registered by that library
    and imported where it is used (tests/importers/test_torch_experts.py)."""
    for name in ATEN:
        parts = name.split(".")
        if len(parts) == 3:
            assert parts[0] != "aten" and parts[0].isidentifier(), name
            continue
        packet, overload = parts
        assert getattr(getattr(torch.ops.aten, packet), overload), name


def test_spmdrules_imports_without_torch_and_the_importer_says_how_to_get_it() -> None:
    code = ("import sys; sys.modules['torch'] = None\n"
            "import spmdrules, spmdrules.plan\n"
            "from spmdrules.importers import torch as ti\n"
            "from spmdrules.importers.errors import MissingExtraError\n"
            "try:\n    ti.load(object(), ())\nexcept MissingExtraError as e:\n    print(e)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "pip install -e '.[torch]' (torch==2.13.0" in run.stdout


def test_the_docs_list_every_mapped_op() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "importers.md").read_text()
    assert [k for k in sorted(ATEN) if f"`{k}`" not in text] == []


class Elementwise(nn.Module):
    """The elementwise, comparison and shape ops the decoders do not use, against torch."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = torch.maximum(x, y) - torch.minimum(x, y) / (y.abs() + 1.0)
        b = torch.exp(-x.abs()) + torch.log(y.abs() + 1) + torch.erf(x) + torch.sqrt(y.abs())
        c = torch.relu(x) * torch.sigmoid(y) + torch.floor(x) - torch.ceil(y) + torch.sign(x)
        m = ((x > 0) & (y <= 0)) | ~(x == y) | (x >= 1.5) | (y < -1.5)
        d = torch.where(m, a, b) + (1.0 - c) + torch.ones_like(x) * 2 + torch.zeros_like(y)
        e = torch.div(d, 3.0, rounding_mode="floor") + d.transpose(0, 1).t()
        f = e.unsqueeze(0).squeeze(0).sum(dim=-1, keepdim=True) + e.sum() / 7
        return torch.log_softmax(f * e, dim=0) + 1.0 / (e.abs() + 1.0)


def test_elementwise_comparison_and_shape_ops_equal_torch() -> None:
    torch.manual_seed(1)
    x, y = torch.randn(5, 5), torch.randn(5, 5)
    m = Elementwise()
    imp = torch_import.export(m, (x, y))
    got = run_serial(imp.graph, imp.feeds(x, y))[imp.outputs[0]]
    np.testing.assert_allclose(got, m(x, y).numpy(), rtol=1e-5, atol=1e-5)
