"""The U-Net of tests/support/cnn_models.py (issue 24), and its variants that upsample with
``nn.Upsample`` nearest and bilinear (issue 26), exported to ONNX by torch, imported with the
spatial opt-in and planned as bench/plan_quality.py plans it (batch on dp, H on mp, 2x2): H stays
split through every up-convolution and upsampling, and on 4 MPI ranks the output equals torch's and the
gradients torch autograd's (the input's and every parameter's: the exporter folds each
BatchNorm into its conv, so those are compared with torch's own fold), with the bytes sent equal
to the plans'."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")
onnx = pytest.importorskip("onnx", reason="needs the onnx extra (make test installs it)")

from cnn_models import SPATIAL_PLAN, unet  # noqa: E402
from hf_models import MESH  # noqa: E402

from spmdrules import plan  # noqa: E402
from spmdrules.completion import complete  # noqa: E402
from spmdrules.execution.adjoint import gradient_program  # noqa: E402
from spmdrules.execution.lowering import lower  # noqa: E402
from spmdrules.execution.mpi import run_mpi  # noqa: E402
from spmdrules.execution.program import HaloStep  # noqa: E402
from spmdrules.importers import onnx as onnx_import  # noqa: E402

#: batch on dp, H on mp
SPLIT = (0, -1, 1, -1)


def _exported(module: Any, x: Any) -> Any:
    buf = io.BytesIO()
    torch.onnx.export(module, (x,), buf, dynamo=False, input_names=["x"])
    return onnx.load_from_string(buf.getvalue())


def _imported(model: Any) -> Any:
    im = onnx_import.import_model(model, spatial_sharding=True)
    plan.apply(im.graph, MESH, SPATIAL_PLAN)
    return im


def _input(batch: int) -> Any:
    return torch.randn(batch, 3, 32, 32, generator=torch.Generator().manual_seed(1))


#: the U-Net's up-sampling: torch's nn module -> the graph op it becomes
UPS = {"transpose": "conv2d_transpose", "nearest": "nearest_interp",
       "bilinear": "bilinear_interp"}


@pytest.mark.parametrize("up", list(UPS))
def test_unet_keeps_h_split_through_its_up_convolutions(up: str) -> None:
    """Every tensor keeps the batch on dp and H on mp, from the input to the head: the
    up-convolutions (kernel = stride = 2) and nearest upsampling need no halo, bilinear
    upsampling and the 3x3 convs one row from each neighbour, and nothing is resharded."""
    im = _imported(_exported(unet(up=up), _input(2)))
    g = im.graph
    res = complete(g)
    ups = [op for op in g.ops if op.type == UPS[up]]
    assert len(ups) == 2
    for op in ups:
        assert res.attr(op.operands[0].name).dims_mapping == SPLIT, op.name
        assert res.attr(op.results[0].name).dims_mapping == SPLIT, op.name
    lost = [t.name for op in g.ops for t in op.results
            if t.ndim == 4 and t.shape[0] == 2 and res.attr(t.name).dims_mapping != SPLIT]
    assert not lost, f"activations that lost their split: {lost}"
    assert not res.reshards
    halos = [i for i in lower(res).instructions if isinstance(i, HaloStep)]
    assert sorted({h.op.split(".")[0] for h in halos}) == sorted(
        {op.name.split(".")[0] for op in g.ops
         if (op.type == "conv2d" and op.operands[1].shape[2] > 1)
         or op.type == "bilinear_interp"})


@pytest.mark.mpi
@pytest.mark.timeout(400)
@pytest.mark.parametrize("up", list(UPS))
def test_unet_on_4_mpi_ranks_equals_torch_forward_and_autograd(up: str) -> None:
    module = unet(up=up)
    x = _input(4)
    model = _exported(module, x)
    im = _imported(model)
    g = im.graph
    out = im.outputs[0]
    gp = gradient_program(lower(complete(g)), [out])
    feeds = {**im.values, "x": x.numpy()}
    cotangent = np.random.default_rng(0).standard_normal(g.tensor(out).shape).astype(np.float32)
    run = run_mpi(gp, {**feeds, gp.seeds[out]: cotangent}, nprocs=4,
                  fetch=[out, *gp.grads.values()], timeout=300)
    assert run.traffic.mismatches(gp) == []  # bytes sent equal the plans', forward and reverse
    assert run.traffic.halo and any(k.startswith("grad[halo") for k in run.traffic.halo)

    # the exporter folds each BatchNorm into the conv before it: torch's own fold of the same
    # module has those weights, and its autograd their gradients
    fused = _folded(module)
    xt = x.clone().requires_grad_(True)
    y = fused(xt)
    y.backward(torch.from_numpy(cotangent))
    np.testing.assert_allclose(run.values[out], module(x).detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(run.values[out], y.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(run.values[gp.grads["x"]], xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    # an initializer shared by several convs (equal folded biases) has the sum of their gradients
    used = {t: _torch_params(fused, model, t) for t in gp.grads if t != "x"}
    params = dict(fused.named_parameters())
    assert sorted(n for names in used.values() for n in names) == sorted(params)
    for t, names in used.items():
        want = sum(params[n].grad.numpy() for n in names)
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(run.values[gp.grads[t]], want, rtol=1e-4, atol=2e-6 * scale,
                                   err_msg=f"{t} ({names})")


def _torch_params(fused: Any, model: Any, onnx_name: str) -> list[str]:
    """The fused module's parameters an ONNX initializer stands for: its name, or (folded
    convs) the weight of each conv node that reads it as weight, the bias of each that reads it
    as bias (a conv node found by its weight's value)."""
    params = dict(fused.named_parameters())
    if onnx_name in params:
        return [onnx_name]
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    # the exporter shares one initializer between equal folded biases through Identity nodes
    aliases = {onnx_name} | {n.output[0] for n in model.graph.node
                             if n.op_type == "Identity" and n.input[0] == onnx_name}
    out = []
    for node in model.graph.node:
        if node.op_type == "Conv" and aliases & set(node.input[1:]):
            w = inits[node.input[1]]
            (name,) = [n for n, p in params.items() if n.endswith(".weight")
                       and p.shape == w.shape and np.allclose(p.detach().numpy(), w, atol=1e-6)]
            out.append(name if node.input[1] in aliases else name.replace(".weight", ".bias"))
    assert out, f"{onnx_name}: no torch parameter"
    return out


def _folded(module: Any) -> Any:
    """``module`` with every Conv2d + BatchNorm2d pair of its Sequentials fused (eval mode)."""
    import copy

    from torch import nn
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    fused = copy.deepcopy(module)
    for seq in [m for m in fused.modules() if isinstance(m, nn.Sequential)]:
        for i in range(len(seq) - 1):
            if isinstance(seq[i], nn.Conv2d) and isinstance(seq[i + 1], nn.BatchNorm2d):
                seq[i] = fuse_conv_bn_eval(seq[i], seq[i + 1])
                seq[i + 1] = nn.Identity()
    for p in fused.parameters():  # a bias made by the fold (the conv had none) included
        p.requires_grad_(True)
    return fused
