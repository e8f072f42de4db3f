"""Dropped splits on imported models (issue 24). Hugging Face decoders (LLaMA, Mistral, Qwen2,
GPT-2, Phi-3) with their Megatron plans on a 2x2 (dp x mp) mesh drop no split at batch 2 (the
MPI tests' batch), and at batch 3 (which does not split over dp=2) each warns once, where the
batch split is dropped. ONNX's ResNet50-light, split on H and W, drops them where a strided
conv makes 7 x 7."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from hf_models import MESH, MODELS, VOCAB

import spmdrules as sr
from spmdrules import plan
from spmdrules.completion import Completion, complete
from spmdrules.graph.graph import Graph

#: where batch 3 drops dp: the token embedding (LLaMA, Mistral, Mixtral, Qwen2, Phi-3), the
#: reshape of the ids (GPT-2)
DROPPED_AT = {**dict.fromkeys(("llama", "mistral", "mixtral", "qwen2", "phi3"),
                              "model.embed_tokens.embedding"),
              "gpt2": "transformer.view"}


def completed(g: Graph) -> tuple[Completion, list[str]]:
    """``complete(g)`` and the messages of the DroppedSplitWarnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = complete(g)
    return r, [str(w.message) for w in caught if w.category is sr.DroppedSplitWarning]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("model", sorted(MODELS))
def test_megatron_plans_drop_a_split_only_where_the_batch_does_not_divide(model: str) -> None:
    torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")
    pytest.importorskip("transformers", reason="needs transformers (a test dependency)")
    from spmdrules.importers import torch as torch_import

    build, megatron = MODELS[model]
    module = build()
    for batch in (2, 3):
        ids = torch.randint(0, VOCAB, (batch, 8), generator=torch.Generator().manual_seed(1))
        g = torch_import.export(module, (ids,)).graph
        plan.apply(g, MESH, megatron)
        r, said = completed(g)
        if batch % 2:
            [d] = r.dropped
            assert (d.tensor, d.op, d.mesh_dims, d.dim) == (DROPPED_AT[model],) * 2 + (("dp",), 0)
            assert d.reason == "divisibility: it does not split the tensor's dims evenly"
            assert said == [str(d)]
        else:
            assert r.dropped == () and said == [], said


def test_resnet50_split_on_h_and_w_drops_them_where_a_strided_conv_makes_7_by_7() -> None:
    # issue 24's CNN case: the last stage's stride-2 convs (the main path's and the shortcut's)
    # make 7 x 7 from 14 x 14, which 2 pieces do not split; the ops after them inherit
    # replicated activations and are not named again
    onnx = pytest.importorskip("onnx", reason="needs the onnx extra (make test installs it)")
    from spmdrules.importers import onnx as onnx_import

    path = Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx"
    im = onnx_import.import_model(path, spatial_sharding=True)
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["h", "w"])
    plan.apply(im.graph, mesh, {im.inputs[0]: plan.Spatial(dims={"H": "h", "W": "w"})})
    r, said = completed(im.graph)
    assert [(d.op, d.mesh_dims, d.dim, d.shape[2:]) for d in r.dropped] == [
        (op, (m,), dim, (7, 7)) for op in ("r143", "r148") for m, dim in (("h", 2), ("w", 3))]
    assert all(r.graph.op(d.op).type == "conv2d" for d in r.dropped)
    assert said == [str(d) for d in r.dropped]
    assert {e.op for e in r.reshards} == {"r143", "r148"}  # the gathers are those drops
