"""Small Hugging Face decoders with random weights (no download), exported, imported and planned
Megatron-style on a 2x2 (dp x mp) mesh: the cases of tests/importers and bench/import.py."""

from __future__ import annotations

import os
from collections.abc import Callable
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
    "*.attn.c_attn": plan.ColwiseParallel(), "*.attn.c_proj": plan.RowwiseParallel(),
    "*.mlp.c_fc": plan.ColwiseParallel(), "*.mlp.c_proj": plan.RowwiseParallel(),
    "lm_head": plan.ColwiseParallel(),
}


def _llama_like(family: str, layers: int, over: dict[str, Any]) -> Any:
    """A decoder of LLaMA's structure (``family``: Llama, Mistral, Qwen2), eager attention."""
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = getattr(transformers, f"{family}Config")(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        attn_implementation="eager", use_cache=False, bos_token_id=0, eos_token_id=1,
        **{"tie_word_embeddings": False, **over})
    return getattr(transformers, f"{family}ForCausalLM")(cfg).eval()


def llama(layers: int = 2, **over: Any) -> Any:
    return _llama_like("Llama", layers, over)


def mistral(layers: int = 2, **over: Any) -> Any:
    return _llama_like("Mistral", layers, over)


def qwen2(layers: int = 2, **over: Any) -> Any:
    """Qwen2: LLaMA's structure with biases on the q, k and v projections."""
    return _llama_like("Qwen2", layers, over)


def gpt2(layers: int = 2, **over: Any) -> Any:
    """GPT-2 with its LM head untied from the token embedding: torch.export keeps one of two
    tied parameters (under the LM head's name), so a tied model's embedding plan would name a
    parameter the program does not read."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=layers, n_head=4, n_positions=16,
                     attn_implementation="eager", use_cache=False, bos_token_id=0,
                     eos_token_id=1, tie_word_embeddings=False, **over)
    return GPT2LMHeadModel(cfg).eval()


MODELS: dict[str, tuple[Callable[..., Any], dict[str, Any]]] = {
    "llama": (llama, LLAMA_PLAN),
    "mistral": (mistral, LLAMA_PLAN),
    "qwen2": (qwen2, LLAMA_PLAN),
    "gpt2": (gpt2, GPT2_PLAN),
}
