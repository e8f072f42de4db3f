"""torch modules imported, run on 2 simulated ranks with their first input split, and compared
with torch's forward and autograd: the importer tests' shared check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import spmdrules as sr
from spmdrules import plan
from spmdrules.completion import complete
from spmdrules.execution.adjoint import gradient_program
from spmdrules.execution.lowering import lower
from spmdrules.execution.mpi import run_mpi
from spmdrules.execution.simulated import run_simulated
from spmdrules.importers import torch as torch_import

MESH = sr.ProcessMesh([0, 1], dim_names=["dp"])


class Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def assert_forward_and_gradients_equal_torch(fn: Callable[..., Any], *args: Any,
                                             mpi: bool = False) -> Any:
    """``fn`` imported, its first input split on dp, run forward and in reverse on 2 simulated
    ranks (2 MPI ranks with ``mpi``): the output equals torch's and the float inputs' gradients
    equal autograd's."""
    imp = torch_import.export(Fn(fn), args)
    plan.apply(imp.graph, MESH, {imp.inputs[0]: plan.DataParallel(dim="dp")})
    (out,) = imp.outputs
    gp = gradient_program(lower(complete(imp.graph)), [out])
    feeds = imp.feeds(*args)
    leaves = [a.detach().clone().requires_grad_(a.dtype.is_floating_point) for a in args]
    want = fn(*leaves)
    seed = np.random.default_rng(0).standard_normal(tuple(want.shape)).astype(np.float32)
    feeds[gp.seeds[out]] = seed
    if mpi:
        got = run_mpi(gp, feeds, nprocs=2, fetch=[out, *gp.grads.values()], timeout=120).values
    else:
        got = run_simulated(gp, feeds).fetch_all([out, *gp.grads.values()])
    np.testing.assert_allclose(got[out], want.detach().numpy(), rtol=1e-5, atol=1e-6)
    want.backward(torch.from_numpy(seed))
    for name, leaf in zip(imp.inputs, leaves, strict=True):
        if leaf.requires_grad:
            np.testing.assert_allclose(got[gp.grads[name]], leaf.grad.numpy(),
                                       rtol=1e-5, atol=1e-6, err_msg=name)
    return imp
