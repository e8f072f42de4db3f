"""Parallelization plans by name pattern: the styles give the annotations a Megatron user writes
by hand, patterns match whole names or dotted tails, and every mistake is a typed error."""

from __future__ import annotations

import pytest

import spmdrules as sr
from spmdrules import examples, plan
from spmdrules.completion import complete
from spmdrules.completion.explain import explain
from spmdrules.graph import ops
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
SIZES = {"batch": 4, "seq": 8, "hidden": 32, "heads": 4, "kv_heads": 2, "ffn": 64, "vocab": 64}
LLAMA = {
    "input_ids": plan.DataParallel(dim="dp"), "labels": plan.DataParallel(),
    "layers.*.q": plan.ColwiseParallel(), "layers.*.k": plan.ColwiseParallel(),
    "layers.*.v": plan.ColwiseParallel(), "*.gate": plan.ColwiseParallel(),
    "*.up": plan.ColwiseParallel(), "*.o": plan.RowwiseParallel(),
    "*.down": plan.RowwiseParallel(), "embed": plan.VocabParallel(),
    "lm_head": plan.ColwiseParallel(),
}


def test_a_megatron_plan_gives_the_hand_written_annotations_and_the_same_completion() -> None:
    g = examples.llama_decoder(2, MESH, **SIZES, annotate=False)
    done = plan.apply(g, MESH, LLAMA)
    by_hand = examples.llama_decoder(2, MESH, **SIZES)
    assert {t.name: t.annotation for t in g.annotated()} == {
        t.name: t.annotation for t in by_hand.annotated()}
    assert done.annotated["layers.*.q"] == ("layers.0.q.weight", "layers.1.q.weight")
    ours, theirs = complete(g), complete(by_hand)
    assert {t.name: ours.attr(t.name) for t in g.tensors} == {
        t.name: theirs.attr(t.name) for t in by_hand.tensors}


def test_explain_names_the_plan_entry_behind_an_annotation() -> None:
    g = examples.llama_decoder(1, MESH, **SIZES, annotate=False)
    plan.apply(g, MESH, LLAMA)
    text = explain(complete(g), "layers.0.o.weight")
    assert "annotated ('mp', None)" in text
    assert "by plan entry '*.o': RowwiseParallel(dim='mp')" in text


def _linears(bias: bool = True) -> Graph:
    """y = x @ W1^T (+ b1); z = y @ W2 (+ b2): a torch-style [out, in] weight read through a
    transpose, and an [in, out] one."""
    with Graph("two") as g:
        x = g.input("x", [4, 8])
        w1 = g.param("a.weight", [16, 8])
        w2 = g.param("b.weight", [16, 8])
        y = ops.matmul(x, ops.transpose(w1, perm=[1, 0]))
        if bias:
            y = ops.add(y, g.param("a.bias", [16]))
        z = ops.matmul(y, w2)
        if bias:
            ops.add(z, g.param("b.bias", [8]))
    return g


def test_feature_dims_are_read_through_transposes_and_trans_y() -> None:
    g = _linears()
    plan.apply(g, MESH, {"a": plan.ColwiseParallel(), "b": plan.RowwiseParallel()})
    spec = {t.name: t.annotation.spec_str() for t in g.annotated() if t.annotation}
    assert spec == {"a.weight": "('mp', None)", "a.bias": "('mp',)",
                    "b.weight": "('mp', None)", "b.bias": "(None,)"}
    with Graph("t") as h:
        w = h.param("lin.weight", [16, 8])
        ops.matmul(h.input("x", [4, 8]), w, trans_y=True)
    plan.apply(h, MESH, {"lin": plan.ColwiseParallel()})
    assert h.tensor("lin.weight").annotation.spec_str() == "('mp', None)"


def _images() -> Graph:
    with Graph("img") as g:
        ops.relu(g.input("image", [2, 3, 8, 8]))
        ops.relu(g.input("tokens", [4, 6, 8]))
    return g


def test_tensor_styles_and_raw_specs() -> None:
    g = _images()
    plan.apply(g, MESH, {"image": plan.Spatial(dims={"H": "dp", "W": "mp"}),
                         "tokens": plan.SequenceParallel()})
    assert g.tensor("image").annotation.spec_str() == "(None, None, 'dp', 'mp')"
    assert g.tensor("tokens").annotation.spec_str() == "(None, 'mp', None)"
    g = _images()
    plan.apply(g, MESH, {"tok*": [sr.Shard(0), sr.Shard(2)],
                         "image": plan.Spec(("dp", None, None, None), partial={"mp": "sum"})},
               priority=1)
    assert g.tensor("tokens").annotation.spec_str() == "('dp', None, 'mp')"
    assert g.tensor("image").annotation.partial == ((1, "sum"),)
    assert g.tensor("image").annotation.priority == 1


def test_a_pattern_matches_a_whole_name_or_a_dotted_tail_only() -> None:
    assert plan.matches("model.layers.0.mlp.down_proj", "layers.*.mlp.down_proj")
    assert plan.matches("model.layers.0.self_attn.q_proj", "*.q_proj")
    assert not plan.matches("model.layers.0.self_attn.q_proj.mm", "*.q_proj")
    assert not plan.matches("model.xlayers.0.mlp", "layers.*.mlp")


def test_a_pattern_matching_nothing_is_an_error_with_suggestions() -> None:
    g = examples.mlp(MESH, batch=4, seq=8, hidden=16, ffn=32, annotate=False)
    with pytest.raises(plan.UnmatchedPatternError,
                       match=r"plan entry 'fc3': ColwiseParallel\(dim='mp'\) matches no module .*"
                             r"did you mean 'fc2', 'fc1'"):
        plan.apply(g, MESH, {"fc1": plan.ColwiseParallel(), "fc3": plan.ColwiseParallel()})
    assert g.annotated() == ()  # nothing changed


def test_conflicts_and_misfits_are_typed_errors() -> None:
    g = examples.mlp(MESH, batch=4, seq=8, hidden=16, ffn=32, annotate=False)
    with pytest.raises(plan.PlanConflictError, match=r"tensor 'fc1\.weight': plan entry 'fc1'"):
        plan.apply(g, MESH, {"fc1": plan.ColwiseParallel(), "fc*": plan.RowwiseParallel()})
    with Graph("norm") as h:
        ops.multiply(h.input("x", [4, 8]), h.param("norm.weight", [8]))
    with pytest.raises(plan.PlanTargetError, match=r"no matmul or embedding uses 'norm\.weight'"):
        plan.apply(h, MESH, {"norm": plan.ColwiseParallel()})
    with pytest.raises(plan.PlanError, match=r"ColwiseParallel is a class; write ColwiseParallel\(\)"):
        plan.apply(g, MESH, {"fc1": plan.ColwiseParallel})
    with pytest.raises(plan.PlanTargetError, match="names mesh dim 'tp'"):
        plan.apply(g, MESH, {"fc1": plan.ColwiseParallel(dim="tp")})
    plan.apply(g, MESH, {"fc1": plan.ColwiseParallel()})
    with pytest.raises(plan.PlanConflictError, match="already annotated"):
        plan.apply(g, MESH, {"fc1": plan.RowwiseParallel()})
