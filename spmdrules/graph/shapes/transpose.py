"""Shape and dtype inference of transpose."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spmdrules.graph.shapes import shape_rule
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg


def _transpose(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = tensor_arg(args, 0)
    perm = attrs.get("perm")
    nd = len(x.shape)
    if perm is None or len(perm) != nd:
        raise ctx.fail("perm", f"{None if perm is None else list(perm)} does not list the "
                       f"{nd} dims of x {list(x.shape)}", f"give a permutation of 0..{nd - 1}")
    norm = [ctx.axis("x", p, nd, "perm entry") for p in perm]
    if sorted(norm) != list(range(nd)):
        raise ctx.fail("perm", f"{list(perm)} is not a permutation", f"list each of 0..{nd - 1} once")
    return (tuple(x.shape[p] for p in norm),)


shape_rule.register(("transpose", "transpose2"), _transpose, shape_rule.same_dtype)
