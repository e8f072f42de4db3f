"""Dropped splits on imported Hugging Face decoders (issue 24): with their Megatron plans on a
2x2 (dp x mp) mesh, LLaMA and GPT-2 drop no split at batch 2 (the MPI tests' batch), and at
batch 3 (which does not split over dp=2) each warns once, where the batch split is dropped."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")
pytest.importorskip("transformers", reason="needs transformers (a test dependency)")

from hf_models import MESH, MODELS, VOCAB  # noqa: E402

import spmdrules as sr  # noqa: E402
from spmdrules import plan  # noqa: E402
from spmdrules.completion import complete  # noqa: E402
from spmdrules.importers import torch as torch_import  # noqa: E402

#: where batch 3 drops dp: the token embedding (LLaMA), the reshape of the ids (GPT-2)
DROPPED_AT = {"llama": "model.embed_tokens.embedding", "gpt2": "transformer.view"}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("model", sorted(MODELS))
def test_megatron_plans_drop_a_split_only_where_the_batch_does_not_divide(model: str) -> None:
    build, megatron = MODELS[model]
    module = build()
    for batch in (2, 3):
        ids = torch.randint(0, VOCAB, (batch, 8), generator=torch.Generator().manual_seed(1))
        g = torch_import.export(module, (ids,)).graph
        plan.apply(g, MESH, megatron)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = complete(g)
        said = [str(w.message) for w in caught if w.category is sr.DroppedSplitWarning]
        if batch % 2:
            [d] = r.dropped
            assert (d.tensor, d.op, d.mesh_dims, d.dim) == (DROPPED_AT[model],) * 2 + (("dp",), 0)
            assert d.reason == "divisibility: it does not split the tensor's dims evenly"
            assert said == [str(d)]
        else:
            assert r.dropped == () and said == [], said
