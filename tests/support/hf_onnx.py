"""Hugging Face models as ``torch.onnx.export`` emits them: the decoders of hf_models.py and the
encoders (BERT, RoBERTa, ViT) and encoder-decoders (T5, BART) at tiny sizes, random weights, no
download. Each is called the way an ONNX user exports it (optimum does the same): keyword
inputs with an attention mask of ones (without one, transformers' mask code calls
``torch.diff``, which the TorchScript exporter has no symbolic for), no cache, the first output
as a plain tensor."""

from __future__ import annotations

import io
import os
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded: configs only

import numpy as np
from hf_models import BATCHED_EXPERTS, DECODERS, MOE_SHARED, SMALL, VOCAB, decoder, small

BATCH, SEQ, IMAGE = 2, 8, 16
#: the encoders' and encoder-decoders' sizes: SMALL's (hidden 32, 4 heads, FFN 64, 2 layers)
TINY: dict[str, Any] = {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "intermediate_size": 64,
                        "max_position_embeddings": 64}
ENCODERS = ("bert", "roberta", "vit", "t5", "bart")
MODELS = (*DECODERS, *ENCODERS)


def model(kind: str) -> Any:
    """The model ``kind`` (a decoder of hf_models.DECODERS or one of ENCODERS), in eval mode."""
    import torch
    import transformers as tf

    if kind in MOE_SHARED:
        # torch.onnx.export's TorchScript exporter has no symbolic for aten::histc, which the
        # default experts path calls (UnsupportedOperatorError, opset 20): a gap of torch's
        # exporter, so the ONNX rows export the batched_mm path
        return decoder(kind, BATCHED_EXPERTS, **{**SMALL, "layers": 2})
    if kind in DECODERS:
        return small(kind)
    torch.manual_seed(0)
    if kind == "bert":
        return tf.BertModel(tf.BertConfig(**TINY)).eval()
    if kind == "roberta":  # its positions start past the padding index
        return tf.RobertaModel(tf.RobertaConfig(**{**TINY, "max_position_embeddings": 66})).eval()
    if kind == "vit":
        return tf.ViTModel(tf.ViTConfig(
            **{k: v for k, v in TINY.items() if k not in ("vocab_size", "max_position_embeddings")},
            image_size=IMAGE, patch_size=4)).eval()
    if kind == "t5":
        return tf.T5Model(tf.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64,
                                      num_layers=2, num_heads=4, use_cache=False)).eval()
    if kind == "bart":
        return tf.BartModel(tf.BartConfig(
            vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
            decoder_ffn_dim=64, max_position_embeddings=64, use_cache=False)).eval()
    raise KeyError(f"no model {kind!r}; the models are {MODELS}")


def inputs(kind: str, seed: int = 1) -> dict[str, np.ndarray]:
    """The ONNX inputs of ``kind``: token ids and a mask of ones (pixels for ViT; the decoder's
    ids too for T5 and BART)."""
    rng = np.random.default_rng(seed)
    if kind == "vit":
        return {"pixel_values": rng.standard_normal((BATCH, 3, IMAGE, IMAGE)).astype(np.float32)}
    feeds = {"input_ids": rng.integers(0, VOCAB, (BATCH, SEQ)),
             "attention_mask": np.ones((BATCH, SEQ), np.int64)}
    if kind in ("t5", "bart"):
        feeds["decoder_input_ids"] = rng.integers(0, VOCAB, (BATCH, SEQ))
    return feeds


def wrapped(kind: str, module: Any) -> Any:
    """``module`` called with keyword inputs, its first output a tensor."""
    import torch

    names = list(inputs(kind))

    class Exported(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = module

        def forward(self, *args: Any) -> Any:
            out = self.model(**dict(zip(names, args, strict=True)), return_dict=True)
            return out.logits if hasattr(out, "logits") else out.last_hidden_state

    return Exported().eval()


def export(kind: str, module: Any, *, dynamo: bool = False) -> Any:
    """``module`` of ``kind`` through ``torch.onnx.export`` (the TorchScript exporter unless
    ``dynamo``) at the static shapes of ``inputs(kind)``: the ``ModelProto``."""
    import onnx
    import torch

    feeds = inputs(kind)
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    buf = io.BytesIO()
    torch.onnx.export(wrapped(kind, module), args, buf, dynamo=dynamo,
                      input_names=list(feeds), output_names=["out"])
    return onnx.load_from_string(buf.getvalue())


def torch_output(kind: str, module: Any) -> np.ndarray:
    import torch

    with torch.no_grad():
        out = wrapped(kind, module)(*(torch.from_numpy(v) for v in inputs(kind).values()))
    return np.asarray(out.numpy())
