"""Dropped splits on imported models (issue 24). The Hugging Face decoders of ``MODELS`` (LLaMA,
Mistral, Qwen2, GPT-2, Phi-3, Mixtral) with their Megatron plans on a 2x2 (dp x mp) mesh drop
no split at batch 2 (the MPI tests' batch), nor at batch 3, whose blocks of 2 and 1 rows fit
dp=2. ONNX's ResNet50-light, split on H and W, keeps them through its 7 x 7 stage and drops them
at the 7x7 average pool, whose 1 x 1 output they no longer fit."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from hf_models import MESH, MODELS, exported

import spmdrules as sr
from spmdrules import plan
from spmdrules.completion import Completion, complete
from spmdrules.graph.graph import Graph


def completed(g: Graph) -> tuple[Completion, list[str]]:
    """``complete(g)`` and the messages of the DroppedSplitWarnings it raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = complete(g)
    return r, [str(w.message) for w in caught if w.category is sr.DroppedSplitWarning]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("model", sorted(MODELS))
def test_megatron_plans_drop_no_split_at_an_even_or_uneven_batch(model: str) -> None:
    pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")
    pytest.importorskip("transformers", reason="needs transformers (a test dependency)")
    _, megatron = MODELS[model]
    for batch in (2, 3):
        g = exported(model, batch).graph
        plan.apply(g, MESH, megatron)
        r, said = completed(g)
        # batch 3 over dp=2: blocks of 2 and 1 rows, which fit (before issue 24 the token
        # embedding, or GPT-2's reshape of the ids, dropped dp there)
        assert r.dropped == () and said == [], (batch, said)


def test_resnet50_split_on_h_and_w_keeps_them_to_the_pool_that_makes_1_by_1() -> None:
    # issue 24's CNN case: the last stage's stride-2 convs make 7 x 7 from 14 x 14, blocks of 4
    # and 3 rows (and columns) that fit 2 processes: the split stays through the 7 x 7 stage.
    # The 7x7 average pool makes 1 x 1, which it no longer fits: dropped there, H and W once
    # each, by the extent, and the only gather is its input's
    onnx = pytest.importorskip("onnx", reason="needs the onnx extra (make test installs it)")
    from spmdrules.importers import onnx as onnx_import

    path = Path(onnx.__file__).parent / "backend/test/data/light/light_resnet50.onnx"
    im = onnx_import.import_model(path, spatial_sharding=True)
    mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["h", "w"])
    plan.apply(im.graph, mesh, {im.inputs[0]: plan.Spatial(dims={"H": "h", "W": "w"})})
    r, said = completed(im.graph)
    assert [(d.op, d.mesh_dims, d.dim, d.shape[2:]) for d in r.dropped] == [
        ("r172", (m,), dim, (7, 7)) for m, dim in (("h", 2), ("w", 3))]
    assert all(r.graph.op(d.op).type == "pool2d" and d.reason.startswith("extent")
               for d in r.dropped)
    assert said == [str(d) for d in r.dropped]
    [gather] = r.reshards
    assert (gather.op, gather.src, gather.dst) == ("r172", sr.DistAttr(mesh, [-1, -1, 0, 1]),
                                                   sr.DistAttr(mesh, [-1, -1, -1, -1]))
    # every conv of the 7 x 7 stage keeps the split
    sevens = [op for op in r.graph.ops if op.type == "conv2d" and op.outputs[0].shape[2] == 7]
    assert sevens and all(r.attr(op.outputs[0]).multi_dims_mapping[2:] == ((0,), (1,))
                          for op in sevens)
