"""Unobservable sorts (issue 26, spmdrules/importers/aten_order.py): a sort of top-k expert ids
whose permutation the program undoes row by row is imported as the identity (no ``argsort``,
no inverse ``index_put``) and equals torch; a sort whose order something observes is imported as
itself and equals torch too."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")
pytest.importorskip("transformers", reason="needs transformers (a test dependency)")

from transformers.integrations import moe  # noqa: E402, F401 (registers grouped_mm_fallback)

from spmdrules.execution.executor import run_serial  # noqa: E402
from spmdrules.importers import torch as torch_import  # noqa: E402

nn = torch.nn
E, K, H, N = 4, 2, 6, 5
pytestmark = pytest.mark.timeout(300)


class Experts(nn.Module):
    """transformers' grouped experts forward (integrations/moe.py), with one ``variant`` that
    lets the program observe the sorted order, or reads ids that are not a top-k's."""

    def __init__(self, variant: str = "") -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.router = nn.Parameter(torch.randn(H, E, generator=g))
        self.w1 = nn.Parameter(torch.randn(E, H, 2 * N, generator=g))
        self.w2 = nn.Parameter(torch.randn(E, N, H, generator=g))
        self.variant = variant

    def forward(self, x: Any) -> Any:
        weights, top = torch.topk(torch.softmax(x @ self.router, dim=-1), K)
        ids = top.reshape(-1) if self.variant != "ids_not_topk" else (
            torch.argsort(x[:, :E], dim=-1)[:, :K].reshape(-1))
        # stable where the order is observed, so that torch's ties are ours
        ids_g, perm = torch.sort(ids, stable=self.variant in (
            "rows_mixed", "perm_returned", "weights_on_columns"))
        x_g = x[perm // K]
        w_g = weights.reshape(-1)[perm]
        offs = torch.cumsum(torch.histc(ids_g.float(), bins=E, min=0, max=E - 1), 0,
                            dtype=torch.int32)
        up = torch.ops.transformers.grouped_mm_fallback(x_g, self.w1, offs=offs)
        gate, lin = up.chunk(2, dim=-1)
        h = nn.functional.silu(gate) * lin
        if self.variant == "other_elementwise":
            # elementwise ops no list of the importer named: a leaky clamp, a comparison
            h = torch.where(gate > 0, gate, 0.1 * gate).clamp(-3.0, 3.0) * torch.rsqrt(
                lin.abs() + 1.0)
        if self.variant == "rows_mixed":
            h = torch.cumsum(h, dim=0)  # row s now depends on the rows sorted before it
        if self.variant == "rows_centred":
            h = h - h.mean(dim=0, keepdim=True)  # every row now reads all of them
        # a 1-D weight per copy broadcasts over the columns (S = H at 3 tokens), not the rows
        col = w_g if self.variant == "weights_on_columns" else w_g[:, None]
        out = torch.ops.transformers.grouped_mm_fallback(h, self.w2, offs=offs) * col
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.size(0))
        y = out[inv].view(x.shape[0], K, H).sum(dim=1)
        if self.variant == "sorted_returned":
            return y, ids_g
        if self.variant == "perm_returned":
            return y, perm
        return y


def _imported(variant: str, tokens: int = 7) -> Any:
    module = Experts(variant).eval()
    x = torch.randn(tokens, H, generator=torch.Generator().manual_seed(1))
    im = torch_import.export(module, (x,))
    got = run_serial(im.graph, im.feeds(x))
    with torch.no_grad():
        want = module(x)
    for name, w in zip(im.outputs, want if isinstance(want, tuple) else (want,), strict=True):
        # torch computes in float32, the serial executor in float64
        np.testing.assert_allclose(got[name], w.numpy(), rtol=1e-5, atol=1e-5, err_msg=name)
    return im.graph


@pytest.mark.parametrize("tokens", [7, 1, 16], ids=["some_experts_idle", "one_token", "more"])
def test_a_sort_the_program_undoes_row_by_row_is_imported_as_the_identity(tokens: int) -> None:
    g = _imported("", tokens)
    types = [op.type for op in g.ops]
    assert "argsort" not in types and "index_put" not in types
    # each grouped matmul reads each row's weights by its expert id, no group ends computed
    assert types.count("index_select") == 2 and "cumsum" not in types


def test_any_elementwise_op_torch_tags_pointwise_keeps_the_sort_the_identity() -> None:
    """where, gt, clamp, abs, rsqrt between the sort and the restore: row-wise by torch's own
    category of the op, as silu and mul are."""
    types = [op.type for op in _imported("other_elementwise").ops]
    assert "argsort" not in types and "index_put" not in types
    assert "where" in types and types.count("index_select") == 2


@pytest.mark.parametrize("variant", ["rows_mixed", "rows_centred", "sorted_returned", "perm_returned",
                                     "ids_not_topk", "weights_on_columns"])
def test_a_sort_whose_order_is_observed_is_imported_as_itself(variant: str) -> None:
    """A row-mixing op between the sort and the restore, the sorted values or the permutation
    an output, ids that are not a top-k's, sorted values broadcast over the columns: the sort
    stays, exact."""
    g = _imported(variant, 3)
    assert "argsort" in [op.type for op in g.ops]
