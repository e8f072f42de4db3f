"""Shape and dtype inference of flash_attention: out, softmax, softmax_lse and the seed offset."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _stat_dtype(d: str) -> str:
    # Paddle keeps the log-sum-exp of half-precision attention in float32
    return "float32" if d in ("float16", "bfloat16") else d


def _dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    d = tensor_arg(args, 0).dtype
    return (d, d, _stat_dtype(d), "int64")


def _flash_attention(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                     ) -> Sequence[OutShape]:
    q, k, v = (tensor_arg(args, i) for i in range(3))
    for name, t in (("q", q), ("k", k), ("v", v)):
        if len(t.shape) != 4:
            raise ctx.fail(name, f"has rank {len(t.shape)}",
                           "give it 4 dims [batch, seq_len, num_heads, head_dim]")
    (b, sq, h, d), (_, skv, _hk, dk), (_, skv_v, _hv, dv) = q.shape, k.shape, v.shape
    for name, t in (("k", k), ("v", v)):
        if t.shape[0] != b:
            raise ctx.fail(name, f"has batch {t.shape[0]} but q has {b}", "give them one batch")
        if t.shape[2] == 0 or h % t.shape[2]:
            raise ctx.fail(name, f"has {t.shape[2]} heads, not a divisor of q's {h}",
                           "give k and v a divisor of q's heads (grouped-query attention)")
    if dk != d or skv_v != skv:
        raise ctx.fail("k", f"head dim {dk} / key length {skv} do not match q's head dim {d} "
                       f"and v's key length {skv_v}", "give q and k one head dim, k and v one "
                       "key length")
    mask = shape_rule.optional_arg(args, 4)
    if mask is not None:
        want = (b, h, sq, skv)
        if len(mask.shape) != 4 or any(
                n != w and not (i < 2 and n == 1) for i, (n, w) in enumerate(zip(mask.shape, want,
                                                                                 strict=True))):
            raise ctx.fail("attn_mask", f"has shape {list(mask.shape)}",
                           f"give it shape {list(want)} (dims 0 and 1 may be 1)")
    return ((b, sq, h, dv), (b, h, sq, skv), (b, h, sq), (2,))


shape_rule.register(("flash_attention",), _flash_attention, _dtype)
