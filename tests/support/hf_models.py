"""Small Hugging Face decoders with random weights (no download), exported, imported and planned
Megatron-style on a 2x2 (dp x mp) mesh: the cases of tests/importers and bench/import.py."""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache, partial
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: configs only

import spmdrules as sr
from spmdrules import plan

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
VOCAB = 64

#: Megatron-style plans, written as a DTensor user writes them
LLAMA_PLAN: dict[str, Any] = {
    "input_ids": plan.DataParallel(dim="dp"),
    "embed_tokens": plan.VocabParallel(),
    "*.q_proj": plan.ColwiseParallel(), "*.k_proj": plan.ColwiseParallel(),
    "*.v_proj": plan.ColwiseParallel(), "*.o_proj": plan.RowwiseParallel(),
    "layers.*.mlp.gate_proj": plan.ColwiseParallel(), "layers.*.mlp.up_proj": plan.ColwiseParallel(),
    "layers.*.mlp.down_proj": plan.RowwiseParallel(),
    "lm_head": plan.ColwiseParallel(),
}
GPT2_PLAN: dict[str, Any] = {
    "input_ids": plan.DataParallel(dim="dp"),
    "transformer.wte": plan.VocabParallel(),
    # q | k | v, each split on mp (Megatron's interleaved QKV), not the fused output
    "*.attn.c_attn": plan.ColwiseParallel(chunks=3), "*.attn.c_proj": plan.RowwiseParallel(),
    "*.mlp.c_fc": plan.ColwiseParallel(), "*.mlp.c_proj": plan.RowwiseParallel(),
    "lm_head": plan.ColwiseParallel(),
}


# ---- the decoders of issue 24's plan-quality measurement (bench/plan_quality.py) --------------
#: the issue's sizes: hidden 256, 8 heads (4 KV), FFN 512, vocabulary 512, 2 layers, fp32
SIZES: dict[str, int] = {"hidden": 256, "heads": 8, "kv_heads": 4, "ffn": 512, "vocab": 512,
                         "layers": 2, "experts": 4, "top_k": 2}
NEOX_PLAN: dict[str, Any] = {
    "input_ids": plan.DataParallel(dim="dp"),
    "embed_in": plan.VocabParallel(),
    "*.attention.query_key_value": plan.ColwiseParallel(),
    "*.attention.dense": plan.RowwiseParallel(),
    "*.mlp.dense_h_to_4h": plan.ColwiseParallel(), "*.mlp.dense_4h_to_h": plan.RowwiseParallel(),
    "lm_head": plan.ColwiseParallel(),
}
PHI3_PLAN: dict[str, Any] = {
    "input_ids": plan.DataParallel(dim="dp"),
    "embed_tokens": plan.VocabParallel(),
    # q | k | v in the proportions of their heads, gate | up: each chunk split on mp
    "*.qkv_proj": plan.ColwiseParallel(chunks=(SIZES["heads"], SIZES["kv_heads"],
                                               SIZES["kv_heads"])),
    "*.o_proj": plan.RowwiseParallel(),
    "layers.*.mlp.gate_up_proj": plan.ColwiseParallel(chunks=2),
    "layers.*.mlp.down_proj": plan.RowwiseParallel(),
    "lm_head": plan.ColwiseParallel(),
}
#: the other experts implementation the bench measures beside transformers' default
#: (``grouped_mm``, which sorts the token copies by expert: DTensor cannot run it on CPU in
#: float32, its ``aten._grouped_mm`` takes only bfloat16 there). ``batched_mm`` reads each token
#: copy's expert weights by index (``aten.index``) and multiplies copy by copy (``aten.bmm``): the
#: one path both sides run, so its row gives DTensor's figure for the MoE decoders.
BATCHED_EXPERTS = "batched_mm"
#: experts sharded on mp along their expert dim (expert parallelism); the router replicated
MOE_PLAN: dict[str, Any] = {
    "input_ids": plan.DataParallel(dim="dp"),
    "embed_tokens": plan.VocabParallel(),
    "*.q_proj": plan.ColwiseParallel(), "*.k_proj": plan.ColwiseParallel(),
    "*.v_proj": plan.ColwiseParallel(), "*.o_proj": plan.RowwiseParallel(),
    "*.experts.gate_up_proj": plan.Spec(("mp", None, None)),
    "*.experts.down_proj": plan.Spec(("mp", None, None)),
    "lm_head": plan.ColwiseParallel(),
}
QWEN2_MOE_PLAN: dict[str, Any] = {
    **MOE_PLAN,  # and the shared expert Megatron-style: its sum joins the experts' combine
    "*.shared_expert.gate_proj": plan.ColwiseParallel(),
    "*.shared_expert.up_proj": plan.ColwiseParallel(),
    "*.shared_expert.down_proj": plan.RowwiseParallel(),
}
#: the MoE kinds of DECODERS -> their shared experts per layer, each planned Megatron-style
MOE_SHARED: dict[str, int] = {"mixtral": 0, "qwen2_moe": 1}


def _common(s: dict[str, int]) -> dict[str, Any]:
    """Config fields the LLaMA-like families share: the default attention (sdpa, which torch's
    decomposition writes as matmuls, softmax and the mask's where), no cache, no padding row,
    the LM head untied (see ``gpt2``)."""
    return {"vocab_size": s["vocab"], "hidden_size": s["hidden"],
            "intermediate_size": s["ffn"], "num_hidden_layers": s["layers"],
            "num_attention_heads": s["heads"], "num_key_value_heads": s["kv_heads"],
            "max_position_embeddings": 64, "use_cache": False,
            "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": None,
            "tie_word_embeddings": False}


def decoder(kind: str, experts: str | None = None, **sizes: int) -> Any:
    """The Hugging Face decoder ``kind`` (a key of DECODERS) at SIZES (``sizes`` overrides),
    random weights from seed 0, in eval mode; a MoE decoder with transformers' default experts
    implementation unless ``experts`` names another. GPT-2's LM head is untied from the token
    embedding like the others': torch.export keeps one of two tied parameters (under the LM
    head's name), so a tied model's embedding plan would name a parameter the program does not
    read."""
    import torch
    import transformers as tf

    s = {**SIZES, **sizes}
    c = _common(s)
    torch.manual_seed(0)
    if kind == "gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config(
            vocab_size=s["vocab"], n_embd=s["hidden"], n_layer=s["layers"], n_head=s["heads"],
            n_inner=s["ffn"], n_positions=64, use_cache=False,
            bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)).eval()
    if kind == "gpt_neox":
        del c["num_key_value_heads"]  # GPT-NeoX has no grouped heads
        return tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(**c)).eval()
    if kind == "gemma":
        c["head_dim"] = s["hidden"] // s["heads"]
    moe = {} if experts is None else {"experts_implementation": experts}
    if kind == "mixtral":
        return tf.MixtralForCausalLM(tf.MixtralConfig(
            **c, num_local_experts=s["experts"], num_experts_per_tok=s["top_k"], **moe)).eval()
    if kind == "qwen2_moe":
        return tf.Qwen2MoeForCausalLM(tf.Qwen2MoeConfig(
            **c, num_experts=s["experts"], num_experts_per_tok=s["top_k"],
            moe_intermediate_size=s["ffn"], shared_expert_intermediate_size=s["ffn"],
            **moe)).eval()
    config, model = {"llama": (tf.LlamaConfig, tf.LlamaForCausalLM),
                     "mistral": (tf.MistralConfig, tf.MistralForCausalLM),
                     "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM),
                     "gemma": (tf.GemmaConfig, tf.GemmaForCausalLM),
                     "phi3": (tf.Phi3Config, tf.Phi3ForCausalLM)}[kind]
    return model(config(**c)).eval()


#: kind -> (display name, Megatron plan, modules whose output is cut into chunks by position
#: (q/k/v, gate/up): DTensor gathers those outputs once, having no chunk-aware style)
DECODERS: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    "llama": ("LLaMA", LLAMA_PLAN, ()),
    "mistral": ("Mistral", LLAMA_PLAN, ()),
    "qwen2": ("Qwen2", LLAMA_PLAN, ()),
    "gemma": ("Gemma", LLAMA_PLAN, ()),
    "gpt2": ("GPT-2", GPT2_PLAN, ("*.attn.c_attn",)),
    "gpt_neox": ("GPT-NeoX", NEOX_PLAN, ()),  # its fused qkv is interleaved per head
    "phi3": ("Phi-3", PHI3_PLAN, ("*.qkv_proj", "layers.*.mlp.gate_up_proj")),
    "mixtral": ("Mixtral", MOE_PLAN, ()),
    "qwen2_moe": ("Qwen2-MoE", QWEN2_MOE_PLAN, ()),
}


# ---- the tests' decoders: the same builder at small sizes -------------------------------------
#: hidden 32, 4 heads (2 KV), FFN 64, vocabulary VOCAB
SMALL: dict[str, int] = {"hidden": 32, "heads": 4, "kv_heads": 2, "ffn": 64, "vocab": VOCAB}


def small(kind: str, layers: int = 2) -> Any:
    """``decoder(kind)`` at SMALL sizes with ``layers`` layers (Qwen2: LLaMA's structure with
    biases on the q, k and v projections)."""
    return decoder(kind, **SMALL, layers=layers)


MODELS: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    kind: (partial(small, kind), DECODERS[kind][1])
    for kind in ("llama", "mistral", "qwen2", "gpt2", "phi3", "mixtral")
}


def token_ids(batch: int, seq: int = 8) -> Any:
    """The tests' input ids: ``batch`` rows of ``seq`` tokens below VOCAB, from seed 1."""
    import torch

    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(1))


def tie(module: Any) -> Any:
    """``module`` with its LM head tied to the token embedding (``tie_word_embeddings=True``, the
    default of many models): one weight read by both."""
    module.config.tie_word_embeddings = True
    module.tie_weights()
    assert module.lm_head.weight is module.get_input_embeddings().weight
    return module


@cache
def _program(kind: str, layers: int, batch: int, tied: bool) -> tuple[Any, str]:
    import torch

    from spmdrules.importers import torch as torch_import

    module = tie(small(kind, layers)) if tied else small(kind, layers)
    ep = torch.export.export(module, (token_ids(batch),))
    return torch_import.decompose_program(ep), type(module).__name__


def exported(kind: str, batch: int = 2, layers: int = 2, *, tied: bool = False) -> Any:
    """``torch_import.export(small(kind, layers), (token_ids(batch),))`` (of ``tie(...)`` with
    ``tied``). torch.export and the decomposition (2 to 3 s of CPU a model) run once per
    argument list in a process, and several test files import the same decoders; the import
    runs on every call, so each caller gets a Graph of its own to annotate."""
    from spmdrules.importers import torch as torch_import

    ep, name = _program(kind, layers, batch, tied)
    return torch_import.from_exported(ep, name=name)
