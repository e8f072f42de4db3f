"""``l2_normalize``, an op from outside spmdrules, registered as a plugin.

``out = x / sqrt(sum(x * x, axis) + epsilon)``: each rank needs the whole normalised axis, the
other dims keep their shards, and a pending sum is resharded first (the op is not linear).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import spmdrules as sr
from spmdrules.engine.described import ranks
from spmdrules.engine.description import Description, letters
from spmdrules.engine.registry import A, T
from spmdrules.engine.rulekit import normalise_axis
from spmdrules.execution import local
from spmdrules.execution.local import Array, LocalContext, LocalValue
from spmdrules.graph.shapes.shape_rule import Arg, OutShape, ShapeContext, tensor_arg
from spmdrules.verify.cases.case import Draft, Rng, draw_rank, draw_shape, negative_axis


def describe(x: tuple[int, ...], *, axis: int, **_: object) -> Description:
    """The rule, as data: one letter per dim of x and out, the normalised one whole."""
    xl = letters(len(x))
    whole = xl[normalise_axis("l2_normalize", "x", axis, len(x))]
    return Description((xl,), (xl,), whole=frozenset(whole), pending=None)


def shape(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]
          ) -> Sequence[OutShape]:
    x = tensor_arg(args, 0).shape
    ctx.axis("x", int(attrs.get("axis", -1)), len(x))
    return (x,)


def _norm(ctx: LocalContext, x: Array) -> tuple[int, Array]:
    """The normalised axis, which this block must hold whole, and the norm along it."""
    local.require_whole(ctx, 0, "x")
    axis = normalise_axis(ctx.op, "x", int(ctx.attrs.get("axis", -1)), x.ndim)
    local.require_full_dims(ctx, 0, "x", [axis], "the norm reads the whole axis")
    eps = float(ctx.attrs.get("epsilon", 1e-12))
    return axis, np.sqrt(np.sum(x * x, axis=axis, keepdims=True) + eps)


def kernel(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x = local.array(ctx, blocks, 0, "x")
    _, norm = _norm(ctx, x)
    return (x / norm,)


def vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
        cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    x, y = local.array(ctx, ins, 0, "x"), local.array(ctx, outs, 0, "out")
    g = local.cotangent(cts, 0, y)
    axis, norm = _norm(ctx, x)
    return ((g - y * np.sum(g * y, axis=axis, keepdims=True)) / norm,)


def cases(op: str, rng: Rng) -> Draft:
    """Random valid calls for ``python -m spmdrules.verify --ops l2_normalize``."""
    x = draw_shape(rng, draw_rank(rng, 1, 3))
    axis = negative_axis(rng, int(rng.integers(len(x))), len(x))
    return Draft(op, (x,), ("real",), {"axis": axis, "epsilon": 1e-12})


sr.register_op(sr.OpSpec(
    "l2_normalize", inputs=[T("x")], outputs=[T("out")],
    attrs=[A("axis", "int", -1), A("epsilon", "float", 1e-12)],
    describe=describe, key=ranks, shape=shape, kernel=kernel, vjp=vjp, cases=cases,
    doc="x / sqrt(sum(x * x, axis) + epsilon): the normalised axis whole."))
