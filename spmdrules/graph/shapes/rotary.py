"""Shape and dtype inference of fused_rotary_position_embedding: out_q, out_k and out_v.

An absent k or v gives a 0-d placeholder output (the op always has three results)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    d = tensor_arg(args, 0).dtype
    return (d, d, d)


def _rope(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    q = tensor_arg(args, 0)
    if len(q.shape) != 4 or q.shape[3] % 2:
        raise ctx.fail("q", f"has shape {list(q.shape)}",
                       "give it 4 dims [batch, seq_len, num_heads, head_dim] with an even head_dim")
    time_major = bool(attrs.get("time_major", False))
    batch, seq = (q.shape[1], q.shape[0]) if time_major else (q.shape[0], q.shape[1])
    outs: list[OutShape] = [q.shape]
    for i, name in ((1, "k"), (2, "v")):
        t = shape_rule.optional_arg(args, i)
        if t is not None and t.shape != q.shape:
            raise ctx.fail(name, f"has shape {list(t.shape)} but q has {list(q.shape)}",
                           f"give {name} q's shape")
        outs.append(() if t is None else t.shape)
    _check_tables(ctx, args, q.shape, batch, seq)
    return tuple(outs)


def _check_tables(ctx: ShapeContext, args: Sequence[Arg], q: OutShape, batch: int,
                  seq: int) -> None:
    """sin and cos, both or neither, [1, seq, 1, head_dim] or [seq, head_dim] (at least seq
    long with position_ids, which are [batch, seq])."""
    sin, cos = shape_rule.optional_arg(args, 3), shape_rule.optional_arg(args, 4)
    ids = shape_rule.optional_arg(args, 5)
    if (sin is None) != (cos is None) or (sin is not None and cos is not None
                                          and sin.shape != cos.shape):
        raise ctx.fail("sin", "and cos must both be given, with one shape", "pass both or neither")
    if sin is not None:
        s = sin.shape
        table = (s[1], s[3]) if len(s) == 4 and s[0] == s[2] == 1 else s if len(s) == 2 else None
        if table is None or table[1] != q[3] or (
                table[0] < seq if ids is not None else table[0] != seq):
            raise ctx.fail("sin", f"has shape {list(s)}",
                           f"give it [1, {seq}, 1, {q[3]}] or [{seq}, {q[3]}] "
                           "(a longer sequence with position_ids)")
    if ids is not None and ids.shape != (batch, seq):
        raise ctx.fail("position_ids", f"has shape {list(ids.shape)}",
                       f"give it [batch, seq_len] = {[batch, seq]}")


shape_rule.register(("fused_rotary_position_embedding",), _rope, _dtype)
