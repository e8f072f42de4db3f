"""The ResNet-18 and the U-Net of tests/support/cnn_models.py, as written, through torch.export
(issue 26): imported with the spatial opt-in, planned as bench/plan_quality.py plans them (batch
on dp, H on mp, 2x2), in eval and in train mode. Every activation keeps both splits; on 4 MPI
ranks the output equals torch's, the gradients torch autograd's (the input's and every
parameter's, the BatchNorms' own: nothing is folded), a training step's running statistics
torch's updated buffers, and the bytes sent equal the plans'."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")

from cnn_models import CNNS, SPATIAL_PLAN  # noqa: E402
from hf_models import MESH  # noqa: E402

from spmdrules import plan  # noqa: E402
from spmdrules.completion import complete  # noqa: E402
from spmdrules.execution.adjoint import gradient_program  # noqa: E402
from spmdrules.execution.lowering import lower  # noqa: E402
from spmdrules.execution.mpi import run_mpi  # noqa: E402
from spmdrules.execution.program import HaloStep  # noqa: E402
from spmdrules.importers import torch as torch_import  # noqa: E402

#: batch on dp, H on mp
SPLIT = (0, -1, 1, -1)
BATCH = 4


@dataclass
class Case:
    module: Any
    x: Any
    imported: Any
    train: bool


def _case(kind: str, train: bool) -> Case:
    _, build, hw = CNNS[kind]
    module = build().train(train)
    x = torch.randn(BATCH, 3, hw, hw, generator=torch.Generator().manual_seed(1))
    im = torch_import.export(module, (x,), spatial_sharding=True)
    plan.apply(im.graph, MESH, SPATIAL_PLAN)
    return Case(module, x, im, train)


@pytest.fixture(scope="module", params=["resnet18", "unet"])
def model(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def eval_case(model: str) -> Case:
    return _case(model, False)


@pytest.fixture(scope="module")
def train_case(model: str) -> Case:
    return _case(model, True)


def test_every_activation_keeps_the_batch_and_h_split(eval_case: Case, train_case: Case) -> None:
    """Convolutions (with halos), pools, batch norms by running or by batch statistics: every
    4-D activation of the batch keeps dp on N and mp on H, but where H has one row (ResNet-18's
    last stage, as on the ONNX path). Nothing is resharded but a training batch norm's
    statistics (a pending sum of a [1, C, 1, 1] vector each, all-reduced) and the input of that
    last stage."""
    for case in (eval_case, train_case):
        g = case.imported.graph
        res = complete(g)
        lost = {t.name for op in g.ops for t in op.results
                if t.ndim == 4 and t.shape[0] == BATCH and res.attr(t.name).dims_mapping != SPLIT}
        assert all(g.tensor(t).shape[2] == 1 for t in lost), lost
        norms = sum(isinstance(m, torch.nn.BatchNorm2d) for m in case.module.modules())
        statistics = [r for r in res.reshards if r.tensor.endswith(("batch_mean", "batch_var"))]
        assert len(statistics) == (2 * norms if case.train else 0)
        for r in statistics:
            assert r.shape[0] == 1 and r.shape[2:] == (1, 1), r
            # a sum over dp, and over mp where H is split (not in ResNet-18's last stage)
            assert 0 in r.src.partial and set(r.src.partial.values()) == {"sum"}, r
            assert not r.dst.partial, r
        others = [r for r in res.reshards if r not in statistics]
        assert all(r.op.startswith("stages.3.0.") for r in others), others
        types = {op.name: op.type for op in g.ops}
        halos = {types[i.op] for i in lower(res).instructions if isinstance(i, HaloStep)}
        # the U-Net's 2x2 pools of stride 2 need no halo, ResNet's 3x3/2 max pool does
        assert halos == ({"conv2d", "pool2d"} if g.name == "ResNet18" else {"conv2d"})


@pytest.mark.mpi
@pytest.mark.timeout(900)
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_on_4_mpi_ranks_equals_torch_forward_autograd_and_running_statistics(
        eval_case: Case, train_case: Case, train: bool) -> None:
    case = train_case if train else eval_case
    im, module = case.imported, case.module
    g = im.graph
    out = im.outputs[0]
    gp = gradient_program(lower(complete(g)), [out])
    cotangent = np.random.default_rng(0).standard_normal(g.tensor(out).shape).astype(np.float32)
    feeds = {**im.feeds(case.x), gp.seeds[out]: cotangent}
    run = run_mpi(gp, feeds, nprocs=4, timeout=800,
                  fetch=[out, *im.updates.values(), *gp.grads.values()])
    assert run.traffic.mismatches(gp) == []  # bytes sent equal the plans', forward and reverse
    assert run.traffic.halo and any(k.startswith("grad[halo") for k in run.traffic.halo)

    # torch in float64 on the same float32 values, and torch's own float32 run beside it: a
    # training batch norm amplifies float32 rounding (over the 4 values of a channel of
    # ResNet-18's last 1x1 stage; through the cancellations of the U-Net's batch statistics, to
    # 1.7% of the input gradient's scale in torch's own float32 run), so each tensor is held to
    # 1e-4 of its largest entry plus twice torch's own float32 error on it
    want, torch32 = _torch_gradients(module, case.x, cotangent, torch.float64), \
        _torch_gradients(module, case.x, cotangent, torch.float32)
    got = {"output": run.values[out], "x": run.values[gp.grads["x"]]}
    assert set(want) - {"output", "x"} <= set(gp.grads)
    got |= {n: run.values[gp.grads[n]] for n in want if n not in got}
    for name, w in want.items():
        own = float(np.abs(torch32[name] - w).max())
        np.testing.assert_allclose(got[name], w, rtol=0,
                                   atol=1e-4 * float(np.abs(w).max()) + 2 * own, err_msg=name)
    reference = copy.deepcopy(module).double()
    reference(case.x.double())  # the training step's running statistics, in float64
    buffers = dict(reference.named_buffers())
    assert sorted(im.updates) == (sorted(buffers) if case.train else [])
    for name, t in im.updates.items():
        np.testing.assert_allclose(run.values[t], buffers[name].double().numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=name)


def _torch_gradients(module: Any, x: Any, cotangent: np.ndarray, dtype: Any) -> dict[str, Any]:
    """torch's output and its gradients (the input's and every parameter's) in ``dtype``, as
    float64 arrays, from a copy of ``module`` in its own mode."""
    reference = copy.deepcopy(module).to(dtype)
    xt = x.to(dtype).clone().requires_grad_(True)
    y = reference(xt)
    y.backward(torch.from_numpy(cotangent).to(dtype))
    grads = {n: p.grad.double().numpy() for n, p in reference.named_parameters()}
    return {"output": y.detach().double().numpy(), "x": xt.grad.double().numpy(), **grads}

