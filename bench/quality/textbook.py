"""The textbook layout's forward bytes and collectives, by formula from the config and the plan
(each layout is described in bench/plan_quality.py's docs)."""

from __future__ import annotations

from typing import Any

from quality.figures import DP, FP32, MP, SEQ, Figure, all_reduce_bytes, collective_bytes


def _all_reduce(batch: int, hidden: int) -> int:
    """One all-reduce over mp of the [batch/dp, seq, hidden] block, on the dp x mp processes."""
    return all_reduce_bytes(batch // DP * SEQ * hidden * FP32, MP) * DP * MP


def textbook_decoder(batch: int, hidden: int, layers: int) -> Figure:
    """1 + 2 L all-reduces of the [batch/dp, seq, hidden] block over mp."""
    count = 1 + 2 * layers
    return Figure(count * _all_reduce(batch, hidden), count)


def textbook_moe(batch: int, hidden: int, layers: int, top_k: int, shared: int
                 ) -> tuple[Figure, Figure]:
    """(expert parallelism by all-to-all, the local dispatch) of a MoE decoder with ``shared``
    Megatron-style shared experts per layer. All-to-all: 1 + (1 + shared) L all-reduces (the
    embedding's, the attentions', the shared experts') and per layer a dispatch and a combine
    all-to-all, each process sending the ``top_k`` copies of its batch/dp x seq / mp tokens. Local
    dispatch: the tokens replicated on mp, the combine one all-reduce per layer that the shared
    experts' sums join, as the dense decoder's MLP."""
    reduces = 1 + (1 + shared) * layers
    sent = top_k * batch // DP * SEQ // MP * hidden * FP32
    a2a = collective_bytes("all_to_all_single", sent, MP) * DP * MP
    routed = Figure(reduces * _all_reduce(batch, hidden) + 2 * layers * a2a, reduces + 2 * layers)
    return routed, textbook_decoder(batch, hidden, layers)


def textbook_routed_experts(e: int, t: int, d: int, ep: int) -> Figure:
    """A dispatch and a combine all-to-all of [E, T, D] between its T and E splits on ep."""
    block = e * t // ep * d * FP32
    return Figure(2 * collective_bytes("all_to_all_single", block, ep) * ep, 2)


def _pair(v: Any) -> int:
    return int(v[0] if isinstance(v, tuple | list) else v)


def textbook_cnn(module: Any, x: Any) -> Figure:
    """The CNN textbook, read from one forward of ``module`` on ``x`` with hooks on its window
    ops."""
    import torch
    from torch import nn

    total, count, split = 0, 0, True

    def hook(mod: Any, args: tuple[Any, ...], out: Any) -> None:
        nonlocal total, count, split
        n, c, h, w = args[0].shape
        row = n // DP * c * w * FP32  # one row of H of a dp shard
        if not split:
            return
        if isinstance(mod, nn.AdaptiveAvgPool2d):  # a pending sum over mp, reduced once
            total += all_reduce_bytes(n // DP * c * FP32, MP) * DP * MP
            count += 1
            return
        if out.shape[2] < MP:  # the split ends: one all-gather of this input over mp
            total += collective_bytes("all_gather_into_tensor", row * h // MP, MP) * DP * MP
            count += 1
            split = False
            return
        if isinstance(mod, nn.Upsample):
            # nearest at an integer scale reads only its own rows; bilinear one row of each
            # neighbour (its output block's first and last rows interpolate across the edge)
            rows = 2 if mod.mode == "bilinear" else 0
            if rows:
                total += (MP - 1) * rows * row * DP
                count += 1
            return
        k, s, p = _pair(mod.kernel_size), _pair(mod.stride), _pair(mod.padding)
        e = _pair(getattr(mod, "dilation", 1)) * (k - 1) + 1  # the window's extent
        if isinstance(mod, nn.ConvTranspose2d):
            # the output block [s b, s b') sums the windows j with s j - p + e > s b and
            # s j - p < s b': its input rows b - (ceil((e - p) / s) - 1) .. b' + ceil(p / s)
            rows = -(-p // s) + max(0, -(-(e - p) // s) - 1)
        else:
            rows = p + max(0, e - s - p)
        if rows:
            total += (MP - 1) * rows * row * DP
            count += 1

    window = (nn.Conv2d, nn.MaxPool2d, nn.ConvTranspose2d, nn.AdaptiveAvgPool2d, nn.Upsample)
    handles = [m.register_forward_hook(hook) for m in module.modules() if isinstance(m, window)]
    try:
        with torch.no_grad():
            module(x)
    finally:
        for handle in handles:
            handle.remove()
    return Figure(total, count)
