"""torch's upsampling imported (issue 26): ``nn.Upsample`` / ``F.interpolate`` nearest and
bilinear (``upsample_*.vec``, which torch.export keeps) by scale and by size, align_corners both
ways, 1-D to 3-D. Each is imported, run on a simulated 2x2 mesh with the batch on dp and the
first spatial dim on mp (halos exchanged), and equals torch's forward and autograd gradient."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")

import spmdrules as sr  # noqa: E402
from spmdrules import plan  # noqa: E402
from spmdrules.completion import complete  # noqa: E402
from spmdrules.execution.adjoint import gradient_program  # noqa: E402
from spmdrules.execution.executor import run_serial  # noqa: E402
from spmdrules.execution.lowering import lower  # noqa: E402
from spmdrules.execution.simulated import run_simulated  # noqa: E402
from spmdrules.importers import torch as torch_import  # noqa: E402
from spmdrules.importers.errors import UnmappedOpError  # noqa: E402

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
F = torch.nn.functional


class Interp(torch.nn.Module):
    def __init__(self, **kw: Any) -> None:
        super().__init__()
        self.kw = kw

    def forward(self, x: Any) -> Any:
        return F.interpolate(x, **self.kw)


CASES: dict[str, tuple[list[int], dict[str, Any]]] = {
    "nearest-x2": ([2, 3, 6, 5], {"scale_factor": 2, "mode": "nearest"}),
    "nearest-x3-uneven": ([2, 3, 7, 5], {"scale_factor": 3, "mode": "nearest"}),
    "nearest-size": ([2, 3, 6, 5], {"size": (11, 4), "mode": "nearest"}),
    "nearest-1d": ([2, 3, 9], {"scale_factor": 2.5, "mode": "nearest"}),
    "nearest-3d": ([2, 2, 4, 3, 3], {"size": (8, 5, 6), "mode": "nearest"}),
    "bilinear-x2": ([2, 3, 6, 5], {"scale_factor": 2, "mode": "bilinear"}),
    "bilinear-x1.5-uneven": ([2, 3, 7, 5], {"scale_factor": 1.5, "mode": "bilinear"}),
    "bilinear-corners": ([2, 3, 6, 5], {"size": (13, 7), "mode": "bilinear",
                                        "align_corners": True}),
    "bilinear-down": ([2, 3, 9, 8], {"size": (4, 3), "mode": "bilinear"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_upsample_imports_and_equals_torch_forward_and_gradient(case: str) -> None:
    shape, kw = CASES[case]
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(3))
    module = Interp(**kw)
    imp = torch_import.export(module, (x,))
    ops = {op.type for op in imp.graph.ops}
    assert ops & {"nearest_interp", "bilinear_interp"}, ops
    spec = ("dp", None, "mp") + (None,) * (len(shape) - 3)
    plan.apply(imp.graph, MESH, {imp.inputs[0]: plan.Spec(spec)})
    res = complete(imp.graph)
    (out,) = imp.outputs
    interp = next(op for op in imp.graph.ops if op.type.endswith("_interp"))
    assert res.attr(interp.results[0].name).dims_mapping[2] == 1, "H keeps its split"
    prog = lower(res)
    gp = gradient_program(prog, [out])
    want = module(x.clone().requires_grad_(True))
    ct = np.random.default_rng(0).standard_normal(tuple(want.shape)).astype(np.float32)
    run = run_simulated(gp, {**imp.feeds(x), gp.seeds[out]: ct})
    np.testing.assert_allclose(run.fetch(out), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    xt = x.clone().requires_grad_(True)
    module(xt).backward(torch.from_numpy(ct))
    np.testing.assert_allclose(run.fetch(gp.grads[imp.inputs[0]]), xt.grad.numpy(), rtol=1e-5,
                               atol=1e-5)


def test_half_pixel_bilinear_to_one_row_is_refused_with_the_fix() -> None:
    """torch reads a single output row at the input's middle, Paddle's kernel at row 0."""
    x = torch.randn(1, 2, 6, 4)
    with pytest.raises(UnmappedOpError, match="align_corners=True"):
        torch_import.export(Interp(size=(1, 3), mode="bilinear"), (x,))
    module = Interp(size=(1, 3), mode="bilinear", align_corners=True)
    corners = torch_import.export(module, (x,))
    assert "bilinear_interp" in {op.type for op in corners.graph.ops}
    got = run_serial(corners.graph, corners.feeds(x))[corners.outputs[0]]
    np.testing.assert_allclose(got, module(x).numpy(), rtol=1e-6, atol=1e-6)


class Aten(torch.nn.Module):
    """One ``.default`` upsample overload called directly (output size and scales both given)."""

    def __init__(self, op: Any, *args: Any) -> None:
        super().__init__()
        self.op, self.args = op, args

    def forward(self, x: Any) -> Any:
        return self.op(x, *self.args)


@pytest.mark.parametrize(("op", "args", "decompose"), [
    (torch.ops.aten.upsample_nearest2d.default, ([10, 7], 2.0, None), True),
    (torch.ops.aten.upsample_bilinear2d.default, ([10, 8], False, 2.0, 2.0), False),
    (torch.ops.aten.upsample_bilinear2d.default, ([9, 6], True, None, None), False),
], ids=["nearest-size-and-scale-h", "bilinear-scales", "bilinear-corners"])
def test_default_overloads_equal_torch(op: Any, args: tuple[Any, ...], decompose: bool) -> None:
    x = torch.randn(1, 2, 5, 4, generator=torch.Generator().manual_seed(4))
    module = Aten(op, *args)
    imp = torch_import.export(module, (x,), decompose=decompose)
    assert {o.type for o in imp.graph.ops} & {"nearest_interp", "bilinear_interp"}
    got = run_serial(imp.graph, imp.feeds(x))[imp.outputs[0]]
    np.testing.assert_allclose(got, module(x).numpy(), rtol=1e-6, atol=1e-6)


def test_a_scale_that_is_not_the_output_ratio_is_refused() -> None:
    """torch sizes the output 10 but reads rows at j / 3: Paddle has no such pair."""
    x = torch.randn(1, 2, 5, 4)
    with pytest.raises(UnmappedOpError, match=r"scale 3\.0 with output length 10"):
        torch_import.export(Aten(torch.ops.aten.upsample_nearest2d.default, [10, 8], 3.0, None),
                            (x,))
