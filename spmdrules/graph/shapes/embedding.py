"""Shape and dtype inference of embedding (lookup_table_v2)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _embedding_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    return (tensor_arg(args, 1).dtype,)


def _embedding(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, w = tensor_arg(args, 0), tensor_arg(args, 1)
    if len(w.shape) != 2:
        raise ctx.fail("weight", f"has rank {len(w.shape)}", "the table is 2-D [vocab, hidden]")
    if x.dtype not in shape_rule.INTEGRAL_DTYPES or x.dtype == "bool":
        raise ctx.fail("x", f"has dtype {x.dtype}", "ids are integers; use int64 or int32")
    row = int(attrs.get("no_grad_idx", -1))
    if row != -1 and not 0 <= row < w.shape[0]:
        raise ctx.fail("weight", f"has {w.shape[0]} rows but no_grad_idx is {row}",
                       f"give a row 0..{w.shape[0] - 1}, or -1 for none")
    return ((*x.shape, w.shape[1]),)


shape_rule.register(("embedding", "lookup_table_v2"), _embedding, _embedding_dtype)


def _c_embedding(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                 ) -> Sequence[OutShape]:
    weight, x = shape_rule.tensor_arg(args, 0), shape_rule.tensor_arg(args, 1)
    if len(weight.shape) != 2:
        raise ctx.fail("weight", f"has rank {len(weight.shape)}",
                       "give the table as a 2-D [rows, hidden] tensor")
    if x.dtype not in shape_rule.INTEGRAL_DTYPES:
        raise ctx.fail("x", f"holds {x.dtype}", "give integer ids")
    return ((*x.shape, weight.shape[1]),)


def _c_embedding_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
                       ) -> Sequence[str]:
    return (shape_rule.tensor_arg(args, 0).dtype,)


shape_rule.register(("c_embedding",), _c_embedding, _c_embedding_dtype)
