"""``plan.from_hf`` (issue 26): the tensor-parallel plan a Hugging Face model carries becomes our
plan; on the decoders of tests/support/hf_models.py it gives the hand-written Megatron plan's
annotations and bytes (or, where HF's plan differs by design, both are measured); explain names
the HF entry behind each annotation; every style without a same-meaning style of ours is refused
by name."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")
tf = pytest.importorskip("transformers", reason="needs transformers (a test dependency)")

from hf_models import DECODERS, MESH, exported, small  # noqa: E402

from spmdrules import plan  # noqa: E402
from spmdrules.completion import complete  # noqa: E402
from spmdrules.completion.explain import explain  # noqa: E402
from spmdrules.graph.graph import Graph  # noqa: E402

EXPERTS = {"mixtral": "ep", "qwen2_moe": "ep"}


def _planned(kind: str, p: dict[str, Any]) -> tuple[Graph, Any]:
    g = exported(kind, 2).graph
    plan.apply(g, MESH, p)
    return g, complete(g)


def _bytes(kind: str, p: dict[str, Any]) -> int:
    return sum(e.plan().total_bytes for e in _planned(kind, p)[1].reshards)


def _annotations(g: Graph) -> dict[str, tuple[str, Any]]:
    return {t.name: (t.annotation.spec_str(), t.storage) for t in g.annotated()
            if t.annotation is not None}


@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2", "gemma", "gpt_neox", "mixtral"])
def test_hf_plan_gives_the_megatron_annotations_and_bytes(kind: str) -> None:
    hf = plan.from_hf(small(kind), data="dp", experts=EXPERTS.get(kind, "tp"))
    ours, theirs = _planned(kind, hf), _planned(kind, DECODERS[kind][1])
    assert _annotations(ours[0]) == _annotations(theirs[0])
    assert sum(e.plan().total_bytes for e in ours[1].reshards) == sum(
        e.plan().total_bytes for e in theirs[1].reshards) > 0


def test_phi3_and_qwen2_moe_plans_differ_from_megatron_by_design() -> None:
    # Phi-3's HF plan gathers the fused qkv and gate_up outputs ('colwise_gather_output'): the
    # weights split as one output, each chunk gathered (45,056 B against the chunk-aware
    # plan's 20,480 B). Qwen2-MoE's leaves the shared expert replicated (its dense-MLP entries
    # name no module of an all-sparse model) where ours splits it Megatron-style.
    phi3 = plan.from_hf(small("phi3"), data="dp")
    assert phi3["model.layers.*.self_attn.qkv_proj"].style == plan.ColwiseParallel()
    assert (_bytes("phi3", phi3), _bytes("phi3", DECODERS["phi3"][1])) == (45056, 20480)
    moe = plan.from_hf(small("qwen2_moe"), data="dp", experts="ep")
    assert sorted(moe.unmatched) == [f"model.layers.*.mlp.{p}_proj" for p in ("down", "gate", "up")]
    # (the experts are masked lookups, spmdrules.engine.masks: no expert weight is gathered)
    assert (_bytes("qwen2_moe", moe), _bytes("qwen2_moe", DECODERS["qwen2_moe"][1])) == (
        20480, 28672)


@pytest.mark.parametrize("kind", ["llama", "phi3", "gpt_neox"])
def test_the_annotated_parameters_are_those_transformers_shards(kind: str) -> None:
    # HF's '*' is a layer index and ours any run of characters: on the model's own names they
    # reach the same parameters, as transformers' own expansion of the plan lists them
    module = small(kind)
    g, _ = _planned(kind, plan.from_hf(module))
    sharded = {n for n in module._expand_parallel_plan(module.tp_plan)
               if n in dict(module.named_parameters())}
    assert {t.name for t in g.annotated()} == sharded


def test_explain_names_the_hf_entry_behind_an_annotation() -> None:
    hf = plan.from_hf(small("llama"), data="dp")
    r = _planned("llama", hf)[1]
    text = explain(r, "model.layers.0.self_attn.q_proj.weight")
    assert "from base_model_tp_plan: 'layers.*.self_attn.q_proj': 'colwise'" in text
    assert "plan entry 'model.layers.*.self_attn.q_proj': ColwiseParallel(dim='mp')" in text
    assert "from LlamaForCausalLM._tp_plan: 'lm_head': 'colwise_gather_output'" in explain(
        r, "lm_head.weight")
    assert ("from base_model_pp_plan: 'embed_tokens': (['input_ids'], ['inputs_embeds'])"
            in explain(r, "input_ids"))


def test_a_config_gives_its_base_model_plan_relative_to_the_base_model() -> None:
    hf = plan.from_hf(small("llama").config)
    assert sorted(hf) == sorted(tf.LlamaConfig().base_model_tp_plan)
    r = _planned("llama", hf)[1]
    assert r.attr("model.layers.1.mlp.down_proj.weight").dims_mapping == (-1, 1)


@pytest.mark.parametrize(("build", "kwargs", "match"), [
    (lambda: small("gpt2"), {}, r"GPT2Config carries no base_model_tp_plan"),
    (lambda: small("mixtral"), {}, r"'model.layers.\*.mlp.experts.gate_up_proj': 'packed_colwise' "
                                    r".* 3 dims .* experts='ep'"),
    (lambda: small("llama"), {"experts": "ep"}, r"LlamaForCausalLM carries no base_model_ep_plan"),
    (lambda: small("llama"), {"experts": "both"}, r"experts='both'"),
    (lambda: object(), {}, r"object is neither a Hugging Face model"),
    (lambda: tf.LlamaConfig(base_model_pp_plan=None), {"data": "dp"},
     r"no base_model_pp_plan to name the model's inputs"),
    (lambda: tf.LlamaConfig(base_model_tp_plan={"layers.*.mlp.gate_up_proj": "packed_rowwise"}),
     {}, r"'layers.\*.mlp.gate_up_proj': 'packed_rowwise' is refused: .*RowwiseParallel"),
    (lambda: tf.LlamaConfig(base_model_tp_plan={"layers.*.mlp": "my_style"}), {},
     r"'layers.\*.mlp': 'my_style': no such transformers style here"),
])
def test_a_style_without_a_same_meaning_style_is_refused_by_name(
        build: Any, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(plan.HFPlanError, match=match):
        plan.from_hf(build(), **kwargs)
