"""Hugging Face's default experts path (``experts_implementation="grouped_mm"``, issue 26):
``sort``, ``histc``, ``empty_permuted`` with ``index_put``, and the grouped matmul
(``transformers::grouped_mm_fallback``, what it runs on CPU in float32) import as registered ops and
equal torch, each alone and in Mixtral and Qwen2-MoE as transformers builds them by default;
what they cannot honour is refused naming the node (spmdrules/importers/aten_experts.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")
transformers = pytest.importorskip("transformers", reason="needs transformers (a test dependency)")

from hf_models import SIZES, VOCAB  # noqa: E402
from transformers.integrations import moe  # noqa: E402, F401 (registers grouped_mm_fallback)

from spmdrules.execution.executor import run_serial  # noqa: E402
from spmdrules.importers import torch as torch_import  # noqa: E402
from spmdrules.importers.errors import UnmappedOpError  # noqa: E402

nn = torch.nn
#: each test exports and imports a model: minutes on a loaded machine
pytestmark = pytest.mark.timeout(900)


def _equal_to_torch(module: Any, *args: Any, rtol: float = 1e-6) -> Any:
    im = torch_import.export(module, args)
    got = run_serial(im.graph, im.feeds(*args))
    with torch.no_grad():
        want = module(*args)
    for name, w in zip(im.outputs, want if isinstance(want, tuple) else (want,), strict=True):
        # the serial executor computes floats in float64; any other dtype is torch's
        assert got[name].dtype == w.numpy().dtype or got[name].dtype.kind == w.numpy(
        ).dtype.kind == "f", name
        np.testing.assert_allclose(got[name], w.numpy(), rtol=rtol, atol=rtol, err_msg=name)
    return im


class Sorts(nn.Module):
    def forward(self, x: Any) -> Any:
        v, i = torch.sort(x)
        dv, di = torch.sort(x, dim=0, descending=True)
        sv, si = torch.sort(x, stable=True, dim=-1)
        return v, i, dv, di, sv, si


def test_sort_is_the_sort_familys_argsort() -> None:
    x = torch.randperm(24, generator=torch.Generator().manual_seed(0)).reshape(4, 6).float()
    im = _equal_to_torch(Sorts(), x)
    assert sum(op.type == "argsort" for op in im.graph.ops) == 3


class Histograms(nn.Module):
    def forward(self, x: Any, ids: Any) -> Any:
        return (torch.histc(x, bins=5, min=-1.0, max=1.5), torch.histc(ids.float(), 4, 0, 3),
                torch.histc(x.double().reshape(2, -1), 3, -0.5, 0.5))


def test_histc_counts_as_torch_inside_outside_and_at_the_bounds() -> None:
    """Values below min and above max are not counted, max itself is in the last bin, a 2-D
    input is counted whole; integer expert ids (the experts path) land on no inner edge."""
    g = torch.Generator().manual_seed(1)
    x = torch.cat([torch.randn(40, generator=g) * 1.5, torch.tensor([-1.0, 1.5, 1.6, -1.1])])
    ids = torch.randint(0, 4, (32,), generator=g)
    im = _equal_to_torch(Histograms(), x, ids)
    assert not any("histc" in op.type for op in im.graph.ops)


class InversePermutation(nn.Module):
    """The experts path's restore of the order: ``inv[perm] = arange``, then rows by ``inv``;
    and ``index_put`` with accumulate on rows of a 2-D tensor."""

    def forward(self, ids: Any, h: Any) -> Any:
        _, perm = torch.sort(ids)
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(perm.size(0))
        acc = torch.zeros(4, h.shape[1]).index_put((ids,), h, accumulate=True)
        return inv, h[perm][inv], acc


def test_index_put_on_empty_restores_the_order_and_accumulates() -> None:
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 4, (10,), generator=g)
    im = _equal_to_torch(InversePermutation(), ids, torch.randn(10, 3, generator=g))
    assert sum(op.type == "index_put" for op in im.graph.ops) == 2


class Grouped(nn.Module):
    def forward(self, x: Any, w: Any, offs: Any) -> Any:
        return torch.ops.transformers.grouped_mm_fallback(x, w, offs=offs)


@pytest.mark.parametrize("ends", [[2, 2, 5, 7], [0, 3, 3, 5], [7, 7, 7, 7]],
                         ids=["empty_group", "rows_past_the_end", "one_group"])
def test_grouped_mm_multiplies_each_row_by_its_groups_weights(ends: list[int]) -> None:
    """Empty groups, rows past the last end (zeros, as transformers' fallback writes them),
    every row in the first group."""
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(7, 5, generator=g), torch.randn(4, 5, 6, generator=g)
    _equal_to_torch(Grouped(), x, w, torch.tensor(ends, dtype=torch.int32), rtol=1e-5)


def _default_experts(kind: str) -> Any:
    """Mixtral or Qwen2-MoE as transformers builds it: the default experts implementation."""
    s = {**SIZES, "hidden": 32, "heads": 4, "kv_heads": 2, "ffn": 64, "vocab": VOCAB}
    common = {"vocab_size": s["vocab"], "hidden_size": s["hidden"],
              "intermediate_size": s["ffn"], "num_hidden_layers": 2,
              "num_attention_heads": s["heads"], "num_key_value_heads": s["kv_heads"],
              "max_position_embeddings": 64, "use_cache": False, "num_experts_per_tok": 2}
    torch.manual_seed(0)
    if kind == "mixtral":
        return transformers.MixtralForCausalLM(transformers.MixtralConfig(
            **common, num_local_experts=4)).eval()
    return transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
        **common, num_experts=4, moe_intermediate_size=64,
        shared_expert_intermediate_size=64)).eval()


@pytest.mark.parametrize("kind", ["mixtral", "qwen2_moe"])
def test_default_experts_path_imports_and_equals_torch(kind: str) -> None:
    model = _default_experts(kind)
    assert model.config._experts_implementation == "grouped_mm"
    ids = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(1))
    ep = torch.export.export(model, (ids,))
    targets = {str(n.target) for n in torch_import.decompose_program(ep).graph.nodes}
    assert {"aten.sort.default", "aten.histc.default", "aten.index_put.default",
            "transformers.grouped_mm_fallback.default"} <= targets
    im = torch_import.from_exported(torch_import.decompose_program(ep))
    got = run_serial(im.graph, im.feeds(ids))[im.outputs[0]]
    with torch.no_grad():
        want = model(ids).logits.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


class BadHistogram(nn.Module):
    def forward(self, x: Any) -> Any:
        return torch.histc(x, bins=4)


class MaskPut(nn.Module):
    def forward(self, x: Any) -> Any:
        return x.index_put((x > 0,), torch.tensor(0.0))


@pytest.mark.parametrize(("module", "why"), [
    (BadHistogram(), "min=0.0, max=0.0: with min >= max torch takes the bounds from the data"),
    (MaskPut(), "only 1-D integer index tensors on the leading dims"),
])
def test_what_cannot_be_mapped_is_refused_naming_the_node(module: Any, why: str) -> None:
    with pytest.raises(UnmappedOpError, match=why) as err:
        torch_import.export(module, (torch.randn(3, 4),))
    assert "node '" in str(err.value)


