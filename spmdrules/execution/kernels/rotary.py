"""Local kernel of fused_rotary_position_embedding: each of q, k, v rotated pairwise.

``out = x * cos + rotate(x) * sin``, per element of the head dim. With
``use_neox_rotary_style`` the pairs are adjacent entries (``rotate(x)[2i] = -x[2i+1]``,
``rotate(x)[2i+1] = x[2i]``); without it they are the two halves (``rotate(x) = [-x2, x1]``).
sin and cos ([1, seq, 1, d] or [seq, d]) follow the sequence of the rank's block, or are read at
``position_ids`` when those are given; when absent they are ``sin(p * w)`` and ``cos(p * w)``
with ``w_i = rotary_emb_base ** (-2i / d)`` at position p (the pair's frequency). An absent k or
v gives a 0-d zero output.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.core.shards import ShardMismatch
from spmdrules.execution import local
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel


def rotate(x: Array, neox: bool) -> Array:
    if neox:
        out = np.empty_like(x)
        out[..., 0::2] = -x[..., 1::2]
        out[..., 1::2] = x[..., 0::2]
        return out
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def _as_bshd(t: Array, time_major: bool) -> Array:
    return t.swapaxes(0, 1) if time_major else t


def tables(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[Array, Array]:
    """sin and cos broadcastable against q's block as [batch, seq, heads, head_dim]."""
    q = array(ctx, blocks, 0, "q")
    time_major = bool(ctx.attrs.get("time_major", False))
    neox = bool(ctx.attrs.get("use_neox_rotary_style", True))
    qb = _as_bshd(q, time_major)
    sin, cos = (blocks[i] if len(blocks) > i else None for i in (3, 4))
    ids = blocks[5] if len(blocks) > 5 else None
    ids = ids if isinstance(ids, np.ndarray) and ids.ndim == 2 else None
    if isinstance(sin, np.ndarray) and isinstance(cos, np.ndarray) and sin.ndim in (2, 4):
        for i, name in ((3, "sin"), (4, "cos")):
            local.require_whole(ctx, i, name)
            local.require_full_dims(ctx, i, name, [0, 2, 3] if sin.ndim == 4 else [1],
                                    "the table broadcasts over batch and heads and rotation "
                                    "needs the whole head dim")
            if ids is None:
                _require_seq_like_q(ctx, i, name, time_major)
        s2 = sin.reshape(sin.shape[-3], sin.shape[-1]) if sin.ndim == 4 else sin
        c2 = cos.reshape(cos.shape[-3], cos.shape[-1]) if cos.ndim == 4 else cos
        if ids is not None:
            local.require_full_dims(ctx, 3, "sin", [sin.ndim - 3 if sin.ndim == 4 else 0],
                                    "position ids may point at any position")
            return s2[ids][:, :, None, :], c2[ids][:, :, None, :]
        return s2[None, :, None, :], c2[None, :, None, :]
    # no table: positions of this rank's block (the rule keeps the sequence whole here)
    d = qb.shape[3]
    base = float(ctx.attrs.get("rotary_emb_base", 10000.0))
    freq = base ** (-2.0 * np.arange(d // 2) / d)
    per = np.repeat(freq, 2) if neox else np.concatenate([freq, freq])
    if ids is not None:
        pos = ids.astype(np.float64)
    else:
        qs, qa = local.input_spec(ctx, 0, "q")
        r = local.block_range(ctx, qs, qa, 0 if time_major else 1)
        pos = np.broadcast_to(np.arange(r.start, r.stop, dtype=np.float64), qb.shape[:2])
    ang = pos[:, :, None, None] * per
    return np.sin(ang), np.cos(ang)


def _require_seq_like_q(ctx: LocalContext, i: int, name: str, time_major: bool) -> None:
    """The table's block must hold the positions of q's block."""
    qs, qa = local.input_spec(ctx, 0, "q")
    ts, ta = local.input_spec(ctx, i, name)
    want = local.block_range(ctx, qs, qa, 0 if time_major else 1)
    have = local.block_range(ctx, ts, ta, len(ts) - 3 if len(ts) == 4 else 0)
    if have != want:
        raise ShardMismatch(
            f"{ctx.op}: {name!r} holds positions {have.start}..{have.stop - 1} but q's block "
            f"needs {want.start}..{want.stop - 1}; give {name!r} q's sequence sharding"
        )


@register_kernel("fused_rotary_position_embedding")
def fused_rope(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    local.require_whole(ctx, 0, "q")
    q = array(ctx, blocks, 0, "q")
    local.require_full_dims(ctx, 0, "q", [3], "rotation pairs entries across the head dim")
    time_major = bool(ctx.attrs.get("time_major", False))
    neox = bool(ctx.attrs.get("use_neox_rotary_style", True))
    sin, cos = tables(ctx, blocks)
    outs: list[LocalValue] = []
    for i, name in ((0, "q"), (1, "k"), (2, "v")):
        x = blocks[i] if len(blocks) > i else None
        if not isinstance(x, np.ndarray) or x.ndim != 4:
            outs.append(np.zeros((), dtype=q.dtype))
            continue
        local.require_whole(ctx, i, name)
        xb = _as_bshd(x, time_major)
        outs.append(_as_bshd(xb * cos + rotate(xb, neox) * sin, time_major))
    return tuple(outs)
