"""``clamp`` (number and tensor bounds, ``clamp_min``/``clamp_max``), the extreme-value
reductions (``max.dim``/``min.dim`` with their indices, ``amax``/``amin``, ``max`` of every
element, ``argmax``/``argmin``, ``linalg_vector_norm``) and ``scatter`` (of a number, of a
tensor, ``scatter_add``) onto existing families (issue 26): the routers of ERNIE-4.5-MoE,
DeepSeek-V4, Exaone-MoE and Granite, Inkling's norms. Before, each was an unmapped op. Each
module is imported, run forward and in reverse on 2 simulated ranks with its
first input split, and equals torch; refusals are typed and name the node."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")

from torch_runs import MESH, Fn, assert_forward_and_gradients_equal_torch  # noqa: E402

import spmdrules as sr  # noqa: E402
from spmdrules import plan  # noqa: E402
from spmdrules.completion import complete  # noqa: E402
from spmdrules.execution.lowering import lower  # noqa: E402
from spmdrules.execution.simulated import run_simulated  # noqa: E402
from spmdrules.importers import torch as torch_import  # noqa: E402

G = torch.Generator().manual_seed(7)
X = torch.randn(4, 5, 6, generator=G)
IDX = torch.randint(0, 5, (4, 3, 6), generator=G)  # dim 1 of X, smaller than X there

CASES: dict[str, tuple[Callable[..., Any], list[Any]]] = {
    "clamp, both bounds": (lambda x: torch.clamp(x, -0.5, 0.7), [X]),
    "clamp, min only": (lambda x: torch.clamp(x, min=0.1) * 2.0, [X]),
    "clamp_min and clamp_max": (lambda x: x.clamp_min(-0.2) + x.clamp_max(0.3), [X]),
    "clamp, tensor bounds": (
        lambda x, lo: torch.clamp(x, lo, lo + 1.0), [X, torch.randn(5, 6, generator=G)]),
    "clamp, integer tensor and int bounds": (
        lambda x: x * torch.clamp(torch.arange(6), 1, 4), [X]),
    "clamp, min above max gives max": (lambda x: torch.clamp(x, 0.5, -0.5) + x, [X]),
    "max.dim values and indices": (
        lambda x: torch.max(x, 1).values * 2.0 + torch.max(x, 1).indices, [X]),
    "min.dim kept, its indices gathered": (
        lambda x: torch.gather(x, 2, torch.min(x, 2, keepdim=True).indices), [X]),
    "max.dim, values only, last dim": (lambda x: torch.max(x, -1)[0], [X]),
    "amax over two dims": (lambda x: torch.amax(x, (1, 2), keepdim=True) - x, [X]),
    "amin over one dim": (lambda x: torch.amin(x, 2) * 3.0, [X]),
    "argmax along a dim, kept": (lambda x: x * torch.argmax(x, 1, keepdim=True), [X]),
    "argmin of every element": (lambda x: x * torch.argmin(x), [X]),
    "scatter of a number, index smaller than self": (lambda x, i: x.scatter(1, i, 2.5), [X, IDX]),
    "scatter of a tensor": (
        lambda x, i, s: x.scatter(1, i, s), [X, IDX[:, :1], torch.randn(4, 1, 6, generator=G)]),
    "scatter_add, repeated positions": (
        lambda x, i, s: x.scatter_add(1, i, s), [X, IDX, torch.randn(4, 3, 6, generator=G)]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_clamp_extremes_and_scatter_equal_torch_forward_and_gradients(case: str) -> None:
    fn, args = CASES[case]
    assert_forward_and_gradients_equal_torch(fn, *args)


def run_forward(fn: Callable[..., Any], *args: Any) -> np.ndarray:
    imp = torch_import.export(Fn(fn), args)
    plan.apply(imp.graph, MESH, {imp.inputs[0]: plan.DataParallel(dim="dp")})
    return np.asarray(run_simulated(lower(complete(imp.graph)), imp.feeds(*args)).fetch(
        imp.outputs[0]))


def test_max_of_every_element_and_ties_and_nans_equal_torch() -> None:
    """Ties give the first index in torch and here; a NaN is a row's max and its index. (The
    reverse of a max over a split dim is refused by the reduction family, as for any max.)"""
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, float("nan"), 5.0, float("nan")],
                      [4.0, 4.0, 4.0, 4.0], [-1.0, -2.0, -1.0, -2.0]])
    for fn in (lambda x: x * torch.max(x), lambda x: torch.max(x, 1).indices,
               lambda x: torch.min(x, 1).indices, lambda x: torch.argmax(x, 1),
               lambda x: torch.max(x, 1).values):
        np.testing.assert_array_equal(run_forward(fn, x), fn(x).numpy())


def test_scatter_reads_only_the_part_of_src_the_index_covers() -> None:
    """torch reads src's leading part on every dim where src is larger than the index (torch's
    own autograd refuses the gradient of this case, so only the forward is compared)."""
    src = torch.randn(4, 5, 6, generator=G)

    def fn(x: Any, i: Any, s: Any) -> Any:
        return x.scatter(1, i, s)

    args = (X, IDX[:, :2, :4], src)
    np.testing.assert_array_equal(run_forward(fn, *args), fn(*args).numpy())


#: x with the points where a norm has only a subgradient: zeros (a zero row), |x| ties for the
#: extremes, and a row whose entries are all equal in magnitude
EDGES = torch.tensor([[[0.0, 0.0, 0.0], [1.0, -2.0, 2.0]], [[-3.0, 3.0, 0.5], [0.0, 1.0, -1.0]],
                      [[2.0, 2.0, -2.0], [0.0, 0.25, 0.0]], [[1.0, 0.0, -4.0], [4.0, 4.0, 4.0]]])
INF = float("inf")


@pytest.mark.parametrize(("fn", "x"), [
    (lambda x: x / torch.linalg.vector_norm(x, dim=-1, keepdim=True), X),
    (lambda x: x * torch.linalg.vector_norm(x, 3), X),
    (lambda x: x.norm(2, 0) + 1.0, X),
    (lambda x: torch.linalg.vector_norm(x, 1, dim=0) * 2.0, X),
    (lambda x: torch.linalg.vector_norm(x, 0, dim=0, keepdim=True) * x, X),
    (lambda x: torch.linalg.vector_norm(x, 2, dim=-1), EDGES),
    (lambda x: torch.linalg.vector_norm(x, 1, dim=-1, keepdim=True), EDGES),
    (lambda x: torch.linalg.vector_norm(x, INF, dim=-1), EDGES),
    (lambda x: torch.linalg.vector_norm(x, -INF, dim=1), EDGES),
    (lambda x: torch.linalg.vector_norm(x, 0.5, dim=-1), EDGES),
    (lambda x: torch.linalg.vector_norm(x, 1.5, dim=-1), EDGES),
    (lambda x: torch.linalg.vector_norm(x, 3, dim=-1), EDGES),
    (lambda x: torch.linalg.vector_norm(x, -1, dim=1), EDGES + 0.5),
    (lambda x: torch.linalg.vector_norm(x, 0, dim=-1) + torch.linalg.vector_norm(x), EDGES),
], ids=["one dim, kept", "every element, p=3", "dim 0 (split)",
        "p=1, dim 0 (split: a pending sum)", "p=0, dim 0 (split), kept", "p=2, a zero row",
        "p=1 at zeros, kept", "inf, ties", "-inf, ties and zeros", "p=0.5 at zeros",
        "p=1.5 at zeros", "p=3, a zero row", "p=-1", "p=0 and every element"])
def test_vector_norms_equal_torch_forward_and_gradients(fn: Callable[..., Any], x: Any) -> None:
    """Gradients as torch's autograd defines them, at the points of a subgradient too."""
    assert_forward_and_gradients_equal_torch(fn, x)


@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_norms_over_the_split_dim_on_2_mpi_ranks_equal_torch_forward_and_gradients() -> None:
    """The reverse of a partial norm on real ranks: p=1 and p=0 over the split dim leave a
    pending sum, each rank's cotangent from its own block; p=2 and p=0.5 gather the dim."""
    def fn(x: Any) -> Any:
        norm = torch.linalg.vector_norm
        return (norm(x, 1, dim=0) * norm(x, 2, dim=0) + norm(x, 0.5, dim=0)
                + norm(x, 0, dim=0, keepdim=True)[0] * norm(x, 3, dim=-1, keepdim=True)[0])

    assert_forward_and_gradients_equal_torch(fn, EDGES.reshape(4, 2, 3), mpi=True)
    assert_forward_and_gradients_equal_torch(fn, X, mpi=True)


@pytest.mark.parametrize("fn", [
    lambda x: torch.linalg.vector_norm(x, INF, dim=0),
    lambda x: torch.linalg.vector_norm(x, INF, dim=(0, 1, 2), keepdim=True) - x,
], ids=["dim 0 (split)", "every dim listed, kept"])
def test_the_reverse_of_an_inf_norm_over_a_split_dim_is_refused_as_any_max(
        fn: Callable[..., Any]) -> None:
    """inf over dim 0 (split) leaves a pending max, whose derivative picks one rank's entries:
    refused, typed, as for ``max`` over a split dim (docs/execution.md); the forward runs."""
    np.testing.assert_allclose(run_forward(fn, X), fn(X).numpy(), rtol=1e-6)
    with pytest.raises(sr.UnsupportedError, match="reverse mode through a pending max"):
        assert_forward_and_gradients_equal_torch(fn, X)


def test_a_norm_over_some_but_not_all_of_several_dims_is_refused_naming_the_node() -> None:
    with pytest.raises(sr.SpmdError, match=r"node 'linalg_vector_norm'.*p_norm takes one dim"):
        torch_import.export(Fn(lambda x: torch.linalg.vector_norm(x, dim=(1, 2))), (X,))


def test_a_scatter_with_reduce_is_refused_naming_the_node_and_the_family() -> None:
    def fn(x: Any, i: Any) -> Any:
        return x.scatter(1, i, 2.0, reduce="add")

    with pytest.raises(sr.SpmdError, match=r"^node 'scatter': op aten\.scatter\.value_reduce "
                                           r"cannot be mapped .* the scatter family"):
        torch_import.export(Fn(fn), (X, IDX))
