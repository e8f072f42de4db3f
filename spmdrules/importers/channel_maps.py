"""Mappings that the ONNX and the ATen importers share for CNN layers: a convolution with its
bias, and batch normalisation by running statistics (inference) or by batch statistics
(training), written as registered ops.

Each takes the importer's per-node context (anything with ``call``, :class:`Caller`), so both
importers name the ops they add after their node the same way.

Why batch normalisation is not Paddle's ``batch_norm`` op: that rule keeps only the channel
dim's split (its statistics are per channel over the batch and every spatial dim), so a batch
split on dp or an H split on mp would be gathered before every norm. As elementwise ops and
reductions, an inference norm is a per-channel affine map that keeps every split, and a training
norm's batch statistics are ``mean`` reductions whose split dims leave a pending sum of a [C]
vector: one all-reduce of C values per statistic (synchronised batch norm), which is what the
whole batch's statistics need on a split batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

from spmdrules.graph.nodes import Tensor


class Caller(Protocol):
    """An importer's context for one node: ``call`` adds a registered op named after it."""

    def call(self, op_type: str, *args: Any, part: str = "", **attrs: Any) -> Tensor: ...


def per_channel(ndim: int) -> list[int]:
    """The shape that broadcasts a [C] vector over the channels (dim 1) of an ``ndim``-D x."""
    return [1, -1] + [1] * (ndim - 2)


def biased_conv(c: Caller, op: str, x: Tensor, w: Tensor, bias: Tensor | None,
                **attrs: Any) -> Tensor:
    """``op`` (a convolution) of x and w, plus ``bias`` broadcast over the channels."""
    y = c.call(op, x, w, part="" if bias is None else "conv", **attrs)
    if bias is None:
        return y
    return c.call("add", y, c.call("reshape", bias, shape=per_channel(x.ndim), part="bias"))


def _affine(c: Caller, centred: Tensor, rstd: Tensor, scale: Tensor | None,
            bias: Tensor | None, shaped: bool) -> Tensor:
    """``centred * rstd * scale + bias`` per channel; ``rstd`` is [C] or, ``shaped``, already
    broadcast over the channels. The gain is computed from the [C] vectors (``scale * rstd``),
    as batch_norm's kernel does."""
    nd = centred.ndim
    if scale is not None:
        if shaped:
            scale = c.call("reshape", scale, shape=per_channel(nd), part="scale_c")
        gain = c.call("multiply", scale, rstd, part="gain")
    else:
        gain = rstd
    if not shaped:
        gain = c.call("reshape", gain, shape=per_channel(nd), part="gain_c")
    scaled = c.call("multiply", centred, gain, part="scaled" if bias is not None else "")
    if bias is None:
        return scaled
    return c.call("add", scaled, c.call("reshape", bias, shape=per_channel(nd), part="bias"))


def inference_batch_norm(c: Caller, x: Tensor, scale: Tensor | None, bias: Tensor | None,
                         mean: Tensor, var: Tensor, eps: float) -> Tensor:
    """``(x - mean) * (scale / sqrt(var + eps)) + bias`` per channel, from running statistics:
    elementwise, so every split of x is kept. ``scale`` or ``bias`` None: an identity one."""
    rstd = c.call("rsqrt", c.call("scale", var, scale=1.0, bias=eps, bias_after_scale=True,
                                  part="var_eps"), part="rstd")
    centred = c.call("subtract", x, c.call("reshape", mean, shape=per_channel(x.ndim),
                                           part="mean"), part="centred")
    return _affine(c, centred, rstd, scale, bias, shaped=False)


@dataclass(frozen=True)
class BatchStatistics:
    """A training batch norm's results: the output, the batch mean and inverse standard
    deviation (torch's ``save_mean``/``save_rstd``, [C]), and the biased batch variance
    broadcast over the channels ([1, C, 1, ...])."""

    out: Tensor
    mean: Tensor
    rstd: Tensor
    var: Tensor


def training_batch_norm(c: Caller, x: Tensor, scale: Tensor | None, bias: Tensor | None,
                        eps: float) -> BatchStatistics:
    """Batch norm by the statistics of this batch: the mean and the biased variance of each
    channel over the batch and every spatial dim (two passes, as torch computes them), then the
    per-channel affine map."""
    reduced = [0, *range(2, x.ndim)]
    mu = c.call("mean", x, axis=reduced, keepdim=True, part="batch_mean")
    centred = c.call("subtract", x, mu, part="centred")
    var = c.call("mean", c.call("multiply", centred, centred, part="square"), axis=reduced,
                 keepdim=True, part="batch_var")
    rstd = c.call("rsqrt", c.call("scale", var, scale=1.0, bias=eps, bias_after_scale=True,
                                  part="var_eps"), part="rstd_c")
    out = _affine(c, centred, rstd, scale, bias, shaped=True)
    channels = [x.shape[1]]
    return BatchStatistics(out, c.call("reshape", mu, shape=channels, part="save_mean"),
                           c.call("reshape", rstd, shape=channels, part="save_rstd"), var)


def running_update(c: Caller, running: Tensor, batch: Tensor, momentum: float, what: str,
                   correction: float = 1.0) -> Tensor:
    """``(1 - momentum) running + momentum correction batch``: a running statistic after one
    training step (``batch`` [C] or broadcast over the channels; torch's running variance is
    the unbiased one, ``correction = n / (n - 1)``)."""
    if batch.shape != running.shape:
        batch = c.call("reshape", batch, shape=list(running.shape), part=f"{what}_c")
    kept = c.call("scale", running, scale=1.0 - momentum, bias=0.0, part=f"{what}_kept")
    new = c.call("scale", batch, scale=momentum * correction, bias=0.0, part=f"{what}_new")
    return c.call("add", kept, new, part=what)


def unbiased(x: Tensor) -> float:
    """``n / (n - 1)`` for the ``n`` entries a channel's batch statistics reduce over."""
    n = math.prod(x.shape) // x.shape[1]
    return n / (n - 1)


__all__ = ["BatchStatistics", "Caller", "biased_conv", "inference_batch_norm", "per_channel",
           "running_update", "training_batch_norm", "unbiased"]
