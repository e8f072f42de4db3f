"""The example model builders: op and annotation counts, op order, shapes and annotations."""

from __future__ import annotations

from typing import Any

import pytest

import spmdrules as sr
from spmdrules import examples
from spmdrules.graph.errors import InvalidSpecError, ShapeError
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
SMALL: dict[str, Any] = {"batch": 2, "seq": 8, "hidden": 16, "heads": 2, "ffn": 32, "vocab": 64}
LAYER_OPS = [
    "layer_norm", "matmul", "add", "reshape", "transpose", "split_with_num", "matmul", "scale",
    "softmax", "matmul", "transpose", "reshape", "matmul", "add", "add", "layer_norm", "matmul",
    "add", "gelu", "matmul", "add", "add",
]


def layer_ops(g: Graph, i: int) -> list[str]:
    return [op.type for op in g.ops if op.name.startswith(f"layers.{i}.")]


@pytest.mark.parametrize("num_layers", [0, 1, 2, 5])
def test_gpt_counts(num_layers: int) -> None:
    g = examples.gpt_decoder(num_layers, MESH, **SMALL)
    assert g.num_ops == examples.GPT_OPS_PER_LAYER * num_layers + examples.GPT_OPS_OUTSIDE
    assert len(g.annotated()) == (examples.GPT_ANNOTATED_PER_LAYER * num_layers
                                  + examples.GPT_ANNOTATED_OUTSIDE)
    assert (examples.GPT_OPS_PER_LAYER, examples.GPT_OPS_OUTSIDE) == (len(LAYER_OPS), 7) == (22, 7)
    assert (examples.GPT_ANNOTATED_PER_LAYER, examples.GPT_ANNOTATED_OUTSIDE) == (6, 6)
    for i in range(num_layers):
        assert layer_ops(g, i) == LAYER_OPS


def test_gpt_ops_outside_the_layers() -> None:
    g = examples.gpt_decoder(1, MESH, **SMALL)
    outside = [op for op in g.ops if not op.name.startswith("layers.")]
    assert sorted(op.type for op in outside) == sorted(
        ["embedding", "embedding", "add", "layer_norm", "matmul", "cross_entropy_with_softmax", "mean_all"]
    )
    assert [op.name for op in outside][-4:] == ["final_ln", "lm_head.matmul", "loss.cross_entropy", "loss"]


def test_gpt_default_shapes_follow_section_6() -> None:
    g = examples.gpt_decoder(1, MESH)
    assert g.op("layers.0.attn.reshape").attr("shape") == (0, 0, 16, 192)
    assert g.op("layers.0.attn.transpose").attr("perm") == (0, 2, 1, 3)
    assert g.tensor("layers.0.attn.reshape").shape == (8, 1024, 16, 192)
    q, k, v = g.op("layers.0.attn.split").outputs
    assert q.shape == k.shape == v.shape == (8, 16, 1024, 64)
    assert g.op("layers.0.attn.scores").attr("trans_y") is True
    assert g.tensor("layers.0.attn.scores").shape == (8, 16, 1024, 1024)
    assert g.tensor("layers.0.attn.merge").shape == (8, 1024, 1024)
    assert g.tensor("layers.0.gelu").shape == (8, 1024, 4096)
    assert g.tensor("lm_head.matmul").shape == (8, 1024, 50304)
    assert g.tensor("loss.cross_entropy.loss").shape == (8, 1024, 1)
    assert g.tensor("loss").shape == () and g.tensor("input_ids").dtype == "int64"


def spec_of(g: Graph, name: str) -> str:
    ann = g.tensor(name).annotation
    assert ann is not None, name
    return ann.spec_str()


def test_gpt_annotations() -> None:
    g = examples.gpt_decoder(2, MESH, **SMALL)
    want = {
        "input_ids": "('dp', None)", "position_ids": "('dp', None)", "labels": "('dp', None, None)",
        "embed.word": "('mp', None)", "embed.pos": "(None, None)", "lm_head.weight": "(None, 'mp')",
    }
    for i in range(2):
        want |= {
            f"layers.{i}.qkv.weight": "(None, 'mp')", f"layers.{i}.qkv.bias": "('mp',)",
            f"layers.{i}.fc1.weight": "(None, 'mp')", f"layers.{i}.fc1.bias": "('mp',)",
            f"layers.{i}.out.weight": "('mp', None)", f"layers.{i}.fc2.weight": "('mp', None)",
        }
    assert {t.name: spec_of(g, t.name) for t in g.annotated()} == want
    assert all(t.annotation is not None and t.annotation.is_fully_closed for t in g.annotated())


def test_gpt_without_annotations_and_on_unnamed_meshes() -> None:
    assert examples.gpt_decoder(1, MESH, annotate=False, **SMALL).annotated() == ()
    plain = sr.ProcessMesh([[0, 1], [2, 3]])
    g = examples.gpt_decoder(1, plain, **SMALL)
    w = g.tensor("layers.0.qkv.weight")
    assert w.attr == sr.DistAttr(plain, [-1, 1])


def test_gpt_bad_arguments() -> None:
    with pytest.raises(InvalidSpecError, match="2-D ProcessMesh"):
        examples.gpt_decoder(1, sr.ProcessMesh([0, 1]), **SMALL)
    with pytest.raises(ShapeError, match="hidden 16 is not divisible by heads 3"):
        examples.gpt_decoder(1, MESH, **{**SMALL, "heads": 3})
    with pytest.raises(ShapeError, match="num_layers"):
        examples.gpt_decoder(-1, MESH)


def test_mlp() -> None:
    g = examples.mlp(MESH, batch=2, seq=4, hidden=8, ffn=16)
    assert [op.type for op in g.ops] == ["matmul", "add", "gelu", "matmul", "add"]
    assert {t.name: spec_of(g, t.name) for t in g.annotated()} == {
        "x": "('dp', None, None)", "fc1.weight": "(None, 'mp')", "fc1.bias": "('mp',)",
        "fc2.weight": "('mp', None)",
    }
    assert g.tensor("fc2.add").shape == (2, 4, 8)
    assert g.tensor("fc2.bias").annotation is None
    assert examples.mlp(MESH, annotate=False).annotated() == ()


def test_gpt_benchmark_size_builds() -> None:
    g = examples.gpt_decoder(96, MESH)  # the benchmark's L=96 at full size
    assert g.num_ops == 2119 and len(g.annotated()) == 582
