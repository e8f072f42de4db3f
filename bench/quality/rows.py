"""The table's rows: for each model and batch, ours, the textbook and DTensor side by side."""

from __future__ import annotations

import sys

from quality.dtensor import dtensor_cnn, dtensor_decoder, dtensor_routed_experts
from quality.figures import SEQ, Row, measured
from quality.ours import of_completion, ours_cnn, ours_module
from quality.textbook import (
    textbook_cnn,
    textbook_decoder,
    textbook_moe,
    textbook_routed_experts,
)


def decoder_row(kind: str, batch: int, experts: str | None = None) -> Row:
    """A decoder's row; a MoE decoder with transformers' default experts implementation unless
    ``experts`` names another (then the label says which)."""
    import torch
    from hf_models import DECODERS, MOE_SHARED, SIZES, decoder

    label, spec, _ = DECODERS[kind]
    label = label if experts is None else f"{label} ({experts})"
    ids = torch.randint(0, SIZES["vocab"], (batch, SEQ),
                        generator=torch.Generator().manual_seed(1))
    ours = measured(lambda: ours_module(decoder(kind, experts), (ids,), spec))
    dtensor = measured(lambda: dtensor_decoder(kind, batch, experts))
    if kind not in MOE_SHARED:
        return Row(label, batch, ours, textbook_decoder(batch, SIZES["hidden"], SIZES["layers"]),
                   dtensor)
    routed, local = textbook_moe(batch, SIZES["hidden"], SIZES["layers"], SIZES["top_k"],
                                 MOE_SHARED[kind])
    return Row(label, batch, ours, routed, dtensor, local, "local dispatch, one all-reduce")


def cnn_row(kind: str, batch: int, importer: str = "torch") -> Row:
    """A CNN's row, ours imported through ``importer`` (``ours.CNN_IMPORTERS``); the ONNX path's
    label says so."""
    import torch
    from cnn_models import CNNS, SPATIAL_PLAN

    label, build, size = CNNS[kind]
    label = label if importer == "torch" else f"{label} (ONNX)"
    x = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(1))
    return Row(label, batch, measured(lambda: ours_cnn(build(), x, SPATIAL_PLAN, importer)),
               measured(lambda: textbook_cnn(build(), x)),
               measured(lambda: dtensor_cnn(build(), x)))


def routed_experts_row() -> Row:
    """The routed-experts layer (tests/support/routed_experts.py; no batch: T tokens)."""
    import routed_experts as re_

    from spmdrules.completion import complete

    textbook = textbook_routed_experts(re_.E, re_.T, re_.D, re_.EP)
    ours = measured(lambda: of_completion(complete(re_.graph())))
    return Row("routed experts (tokens)", re_.T, ours, textbook, measured(dtensor_routed_experts))


def rows_for(models: list[str], batches: list[int], cnn_importers: tuple[str, ...] = ("torch",)
             ) -> list[Row]:
    from hf_models import BATCHED_EXPERTS, DECODERS, MOE_SHARED

    out: list[Row] = []
    for kind in models:
        if kind == "routed_experts":
            out.append(routed_experts_row())
            continue
        for b in batches:
            new = [decoder_row(kind, b)] if kind in DECODERS else [
                cnn_row(kind, b, importer) for importer in cnn_importers]
            if kind in MOE_SHARED:  # DTensor's figure: the path it runs on CPU in float32
                new.append(decoder_row(kind, b, BATCHED_EXPERTS))
            out += new
            for r in new:
                print(f"  measured {r.model} at batch {b}", file=sys.stderr, flush=True)
    return out


__all__ = ["cnn_row", "decoder_row", "routed_experts_row", "rows_for"]
