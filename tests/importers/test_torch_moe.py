"""Mixture-of-experts decoders (issues 24, 26): the router's ``aten.topk`` maps onto the sort
family, and Hugging Face Mixtral and Qwen2-MoE (small configs, random weights, transformers'
default experts implementation, ``grouped_mm``) import, equal torch run serially, and complete
with the expert-parallel plan at the textbook's collectives. On 4 MPI ranks, forward and
gradients against torch: tests/importers/test_torch_models.py."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")
pytest.importorskip("transformers", reason="needs transformers (a test dependency)")

from hf_models import DECODERS, MESH, decoder  # noqa: E402

from spmdrules import plan  # noqa: E402
from spmdrules.completion import complete  # noqa: E402
from spmdrules.execution.executor import run_serial  # noqa: E402
from spmdrules.importers import torch as torch_import  # noqa: E402

nn = torch.nn
#: MODELS' small sizes: the MoE decoders at hidden 32, 4 heads (2 KV), FFN 64, vocabulary 64
SMALL = {"hidden": 32, "heads": 4, "kv_heads": 2, "ffn": 64, "vocab": 64}


class Router(nn.Module):
    """topk as routers and samplers call it: the last dim, another dim, the smallest, a 0-d
    tensor; the indices read back by indexing."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        v, i = torch.topk(torch.softmax(x, dim=-1), 2)
        lo, j = torch.topk(x, 3, dim=0, largest=False)
        top, _ = torch.topk(x.sum(), 1)
        rows = torch.arange(x.shape[0])[:, None]
        return v / v.sum(dim=-1, keepdim=True), i, lo, j, top, x[rows, i]


def test_topk_maps_onto_the_sort_family_and_equals_torch() -> None:
    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(0))
    imp = torch_import.export(Router(), (x,))
    tops = [op for op in imp.graph.ops if op.type == "topk"]
    assert [(op.attr("k"), op.attr("axis"), op.attr("largest")) for op in tops] == [
        (2, 1, True), (3, 0, False), (1, 0, True)]
    got = run_serial(imp.graph, imp.feeds(x))
    for name, want in zip(imp.outputs, Router()(x), strict=True):
        assert got[name].dtype == want.numpy().dtype, name
        np.testing.assert_allclose(got[name], want.numpy(), rtol=1e-6, atol=1e-6, err_msg=name)


class Top2(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (*torch.topk(x, 2), *torch.topk(x, 2, largest=False))


def test_topk_counts_nan_as_the_largest_value_as_torch_and_paddle() -> None:
    # Paddle's CPU topk and torch's compare with "NaN first" when largest; the kernel's plain
    # descending sort of -x put NaN last and returned 2.0 where torch returns NaN
    nan = float("nan")
    x = torch.tensor([[1.0, nan, 2.0, -1.0], [3.0, -2.0, nan, 0.0], [0.5, 4.0, -3.0, 1.5]])
    imp = torch_import.export(Top2(), (x,))
    got = run_serial(imp.graph, imp.feeds(x))
    for name, want in zip(imp.outputs, Top2()(x), strict=True):
        np.testing.assert_array_equal(got[name], want.numpy(), err_msg=name)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["mixtral", "qwen2_moe"])
def test_moe_decoder_imports_equals_torch_and_completes_with_the_expert_parallel_plan(
        kind: str) -> None:
    module = decoder(kind, **SMALL)
    ids = torch.randint(0, SMALL["vocab"], (2, 8), generator=torch.Generator().manual_seed(1))
    imp = torch_import.export(module, (ids,))
    g = imp.graph
    np.testing.assert_allclose(run_serial(g, imp.feeds(ids))[imp.outputs[0]],
                               module(ids).logits.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert [op.attr("k") for op in g.ops if op.type == "topk"] == [2, 2]  # one router a layer

    done = plan.apply(g, MESH, DECODERS[kind][1])
    assert all(done.annotated.values()), [k for k, v in done.annotated.items() if not v]
    r = complete(g)
    assert r.converged
    experts = {t.name for t in g.params if ".experts." in t.name}
    assert len(experts) == 2 * 2  # gate_up_proj and down_proj in each layer
    for name in experts:  # split by expert on mp, as the plan says
        assert r.attr(g.tensor(name)).dims_mapping == (1, -1, -1), name
    # The default path's sort of the token copies by expert is undone by its inverse
    # permutation, row by row (spmdrules.importers.aten_order): imported as the identity, the
    # copies keep their tokens' order and dp split, and no sort gathers them.
    assert module.config._experts_implementation == "grouped_mm"
    assert not {"argsort", "index_put"} & {op.type for op in g.ops}
    # Expert parallelism: each grouped matmul reads each token copy's expert weights with
    # index_select, a masked lookup from the expert-split tables (spmdrules.engine.masks): each
    # process computes its experts' copies and zeros for the others, through silu and the
    # weighting, so no weight is gathered and the combine is one all-reduce on mp. Every reshard
    # is an all-reduce on mp (the embedding's, each layer's attention and combine, Qwen2-MoE's
    # shared expert's) or a free slice.
    assert not {e.tensor for e in r.reshards} & {t.name for t in g.params}
    looked_up = [op.outputs[0] for op in g.ops if op.type == "index_select"]
    assert len(looked_up) == 2 * 2
    assert all(r.attr(t).masks == {1: 0} for t in looked_up)
    moved = [(s.kind, s.where) for e in r.reshards for s in e.plan().steps
             if s.kind not in ("slice", "zero_partial")]
    assert set(moved) == {("all_reduce", "mp")}
    assert len(moved) == 1 + 2 * 2 + (2 if kind == "qwen2_moe" else 0)
