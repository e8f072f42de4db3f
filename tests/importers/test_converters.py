"""Converters from user code (``spmdrules.importers.converters``): a torch custom op and an ONNX
op of a custom domain mapped onto existing rule families, imported and run equal to the
framework (issue 26, item 8). docs/importers.md's example runs in tests/test_docs.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")
onnx = pytest.importorskip("onnx", reason="needs the onnx extra (make test installs it)")
from onnx import TensorProto, helper  # noqa: E402

from spmdrules.core.errors import DuplicateRegistrationError  # noqa: E402
from spmdrules.execution.executor import run_serial  # noqa: E402
from spmdrules.importers import converters  # noqa: E402
from spmdrules.importers import onnx as onnx_import  # noqa: E402
from spmdrules.importers import torch as torch_import  # noqa: E402
from spmdrules.importers.aten import ATEN  # noqa: E402
from spmdrules.importers.converters import (  # noqa: E402
    ConverterError,
    aten_converter,
    onnx_converter,
)
from spmdrules.importers.onnx_ops import OPS  # noqa: E402
from spmdrules.importers.unmapped import UnmappedOpsError  # noqa: E402


@torch.library.custom_op("spmdrules_plugin::scaled_silu", mutates_args=())
def scaled_silu(x: torch.Tensor, alpha: float) -> torch.Tensor:
    return alpha * torch.nn.functional.silu(x)


@scaled_silu.register_fake
def _(x: torch.Tensor, alpha: float) -> torch.Tensor:
    return torch.empty_like(x)


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scaled_silu(self.fc(x), 0.5)


@pytest.fixture
def tables() -> Iterator[None]:
    """The tables as they were: a registration here must not leak into other tests."""
    converters.load()
    aten, ops = dict(ATEN), dict(OPS)
    yield
    ATEN.clear()
    ATEN.update(aten)
    OPS.clear()
    OPS.update(ops)


def _silu(c: Any, a: dict[str, Any]) -> Any:
    return c.call("scale", c.call("silu", a["x"], part="silu"), scale=float(a["alpha"]))


def test_a_custom_torch_op_maps_onto_a_family_from_user_code(tables: None) -> None:
    torch.manual_seed(0)
    net, x = Net(), torch.randn(4, 8)
    with pytest.raises(UnmappedOpsError, match=r"spmdrules_plugin\.scaled_silu\.default"):
        torch_import.export(net, (x,))
    aten_converter("spmdrules_plugin::scaled_silu")(_silu)
    imp = torch_import.export(net, (x,))
    assert [op.type for op in imp.graph.ops if op.type in ("silu", "scale")] == ["silu", "scale"]
    got = run_serial(imp.graph, imp.feeds(x))[imp.outputs[0]]
    np.testing.assert_allclose(got, net(x).detach().numpy(), rtol=1e-5, atol=1e-6)


@torch.library.custom_op("spmdrules_plugin::relu", mutates_args=())
def tripled(x: torch.Tensor) -> torch.Tensor:
    return 3 * x


@tripled.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def test_an_aten_op_of_the_same_name_is_not_the_custom_ops_converter() -> None:
    """The table was keyed by the bare name: a custom ``spmdrules_plugin::relu`` (3 x) was
    imported as aten's relu, a wrong graph, and reported as ``aten.relu`` when it failed."""

    class Triple(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return tripled(x)

    with pytest.raises(UnmappedOpsError, match=r"op spmdrules_plugin\.relu\.default cannot"):
        torch_import.load(Triple(), (torch.randn(2, 3),))
    assert converters.key(torch.ops.aten.relu.default) == "relu.default"
    assert converters.key(tripled._opoverload) == "spmdrules_plugin.relu.default"


def test_registration_spellings_and_refusals(tables: None) -> None:
    aten_converter(torch.ops.spmdrules_plugin.scaled_silu)(_silu)  # the packet: every overload
    assert ATEN["spmdrules_plugin.scaled_silu.default"] is _silu
    with pytest.raises(DuplicateRegistrationError,
                       match=r"'spmdrules_plugin\.scaled_silu\.default': a converter is already "
                             r"registered for it, at .*_silu; .*aten_converter: pass replace=True"):
        aten_converter("spmdrules_plugin::scaled_silu.default")(_silu)
    aten_converter(torch.ops.spmdrules_plugin.scaled_silu.default, replace=True)(_silu)
    with pytest.raises(ConverterError, match="names no namespace"):
        aten_converter("scaled_silu")
    with pytest.raises(ConverterError, match="is not 'namespace::name"):
        aten_converter("::relu")
    with pytest.raises(ConverterError, match="is not a torch op"):
        aten_converter(42)
    with pytest.raises(ConverterError, match="'Relu': a converter is already registered"):
        onnx_converter("Relu")(lambda c: [])
    with pytest.raises(ConverterError, match="give op types as strings"):
        onnx_converter()
    aten_converter("aten::cumprod")(_silu)
    assert ATEN["cumprod.default"] is _silu


def test_an_onnx_op_of_a_custom_domain_maps_from_user_code(tables: None) -> None:
    f = TensorProto.FLOAT
    g = helper.make_graph([helper.make_node("FastGelu", ["x"], ["y"], domain="com.microsoft")],
                          "m", [helper.make_tensor_value_info("x", f, [2, 3])],
                          [helper.make_tensor_value_info("y", f, [2, 3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13),
                                                helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(UnmappedOpsError, match=r"com\.microsoft\.FastGelu"):
        onnx_import.load(model)

    @onnx_converter("FastGelu", domain="com.microsoft")
    def _fast_gelu(c: Any) -> list[Any]:
        return [c.call("gelu", c.tensor(0), approximate=True)]

    imp = onnx_import.import_model(model)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    got = run_serial(imp.graph, {"x": x})[imp.outputs[0]]
    want = torch.nn.functional.gelu(torch.from_numpy(x), approximate="tanh").numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert "FastGelu" not in OPS  # the default domain's table entry is another op's


def test_converter_modules_register_by_existing() -> None:
    """Every ``aten_*`` and ``onnx_*`` module of the package is imported before an import."""
    import sys

    converters.load()
    assert "spmdrules.importers.aten_sort" in sys.modules
    assert "spmdrules.importers.onnx_windows" in sys.modules
    assert "topk.default" in ATEN and "Conv" in OPS
