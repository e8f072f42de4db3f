"""The local kernel of label_smooth, ``(1 - epsilon) * label + epsilon * prior``, and of its
gradient op. Without a prior (or with a 0-d one) the prior is uniform over the global class count
(label's last dim, read from the context, not the block)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.execution import local
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel


def prior_block(ctx: LocalContext, blocks: Sequence[LocalValue], ndim: int) -> Array | None:
    """The prior's block, with the leading size-1 dims the result lacks dropped; None when
    the prior is uniform."""
    p = blocks[1] if len(blocks) > 1 else None
    if p is None:
        return None
    prior = array(ctx, blocks, 1, "prior_dist")
    if prior.ndim == 0:
        return None
    local.require_whole(ctx, 1, "prior_dist")
    if prior.ndim <= ndim:
        local.require_aligned(ctx, 1, "prior_dist")
        return prior
    return prior.reshape(prior.shape[prior.ndim - ndim:])


@register_kernel("label_smooth")
def label_smooth(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    label = array(ctx, blocks, 0, "label")
    local.require_whole(ctx, 0, "label")
    eps = float(ctx.attrs["epsilon"])
    prior = prior_block(ctx, blocks, label.ndim)
    classes = int(ctx.input_shapes[0][-1])
    smooth = eps / classes if prior is None else eps * prior
    return (np.asarray((1.0 - eps) * label + smooth, dtype=label.dtype),)


@register_kernel("label_smooth_grad")
def label_smooth_grad(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    g = array(ctx, blocks, 0, "out_grad")
    return (np.asarray((1.0 - float(ctx.attrs["epsilon"])) * g),)
