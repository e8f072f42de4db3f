"""Local kernel of flash_attention: scaled dot-product attention on a rank's batch and heads.

``S = q k^T / sqrt(head_dim) + attn_mask`` (an additive mask, broadcast over size-1 batch and
heads), causal masking keeps key ``j`` for query ``i`` when ``j <= i + seq_len_kv - seq_len_q``
(the bottom-right alignment of FlashAttention 2), ``P = softmax(S)`` over the keys, ``out = P v``;
``softmax`` is P and ``softmax_lse`` the log-sum-exp of S per query. Grouped-query heads share
each k and v head among ``num_heads / num_heads_kv`` consecutive q heads. A query row with no key
left gives out 0, softmax 0 and lse -inf.

Dropout: the kernel computes attention without dropout, which is the op when ``is_test`` is set
or ``dropout`` is 0; training-mode dropout needs a random stream every rank draws alike, which
this library does not model, so it is refused (UnsupportedError). ``fixed_seed_offset`` and
``rng_name`` are carried but unused; the seed_offset output is [0, 0].
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from spmdrules.core.errors import UnsupportedError
from spmdrules.core.shards import ShardMismatch
from spmdrules.execution import local
from spmdrules.execution.local import Array, LocalContext, LocalValue, array, register_kernel


def check_dropout(ctx: LocalContext) -> None:
    if float(ctx.attrs.get("dropout", 0.0)) > 0.0 and not bool(ctx.attrs.get("is_test", False)):
        raise UnsupportedError(
            f"{ctx.op}: dropout={ctx.attrs['dropout']} in training mode needs a random stream "
            "shared by every rank, which is not modelled; pass is_test=True or dropout=0.0"
        )


def group_heads(ctx: LocalContext, q: Array, t: Array, name: str) -> Array:
    """``t`` ([b, s, hk, d]) with each head repeated for the q heads of its group."""
    h, hk = q.shape[2], t.shape[2]
    if hk == h:
        return t
    qs, qa = local.input_spec(ctx, 0, "q")
    ts, ta = local.input_spec(ctx, 1 if name == "k" else 2, name)
    qr = local.block_range(ctx, qs, qa, 2)
    tr = local.block_range(ctx, ts, ta, 2)
    group = qs[2] // ts[2]
    if hk == 0 or [i // group for i in qr] != [j for j in tr for _ in range(group)]:
        raise ShardMismatch(
            f"{ctx.op}: this rank holds q heads {qr.start}..{qr.stop - 1} but {name} heads "
            f"{tr.start}..{tr.stop - 1}, not the ones their groups share; split the heads by a "
            "count that divides both head counts, or replicate them"
        )
    return np.repeat(t, group, axis=2)


def scores(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[Array, Array, Array, Array]:
    """(q, grouped k, grouped v, S) with S as [b, h, sq, skv], masks applied."""
    check_dropout(ctx)
    q, k, v = (array(ctx, blocks, i, n) for i, n in enumerate(("q", "k", "v")))
    for i, name in enumerate(("q", "k", "v")):
        local.require_whole(ctx, i, name)
        local.require_full_dims(ctx, i, name, [1, 3], "attention needs whole sequences and heads")
    kg, vg = group_heads(ctx, q, k, "k"), group_heads(ctx, q, v, "v")
    s = np.einsum("bqhd,bkhd->bhqk", q, kg) / math.sqrt(q.shape[3])
    mask = blocks[4] if len(blocks) > 4 else None
    if isinstance(mask, np.ndarray) and mask.ndim == 4:
        local.require_whole(ctx, 4, "attn_mask")
        s = s + mask
    if bool(ctx.attrs.get("causal", False)):
        sq, skv = s.shape[2], s.shape[3]
        keep = np.arange(skv)[None, :] <= np.arange(sq)[:, None] + (skv - sq)
        s = np.where(keep, s, -np.inf)
    return q, kg, vg, s


def softmax_rows(s: Array) -> tuple[Array, Array]:
    """(P, lse) over the last axis; a row with no finite score gives P 0 and lse -inf."""
    m = np.max(s, axis=-1, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    tot = np.sum(e, axis=-1, keepdims=True)
    p = np.divide(e, tot, out=np.zeros_like(e), where=tot > 0)
    with np.errstate(divide="ignore"):
        lse = (np.log(tot) + m)[..., 0]
    return p, lse


@register_kernel("flash_attention")
def flash_attention(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    _, _, vg, s = scores(ctx, blocks)
    p, lse = softmax_rows(s)
    out = np.einsum("bhqk,bkhd->bqhd", p, vg)
    return (out, p, lse, np.zeros(2, dtype=np.int64))
