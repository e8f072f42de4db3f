"""Shape ops described by a DimTrans: reshape, reshape2, flatten, squeeze, unsqueeze, unsqueeze2.

Each op is one pair of transformation builders: forward (input dims -> output dims) and reverse
(output dims -> input dims). The shared inference in ``spmdrules.engine.dim_trans`` derives both rules.

Every one of these ops only relabels the elements of its input, so it is linear and local: a
pending partial passes through it in both directions (each device reshapes its piece of the sum
into its piece of the reshaped sum), and is reduced where a consumer needs it whole, on the
tensor of that consumer's size. Paddle carries partials through reshape and flatten's forward
only (docs/deviations/shape.md, ``shape-op-keeps-partial``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine import dim_trans
from spmdrules.engine.derived import mark_derived
from spmdrules.engine.dim_trans import SINGLETON, DimTrans, InputDim, Transformation
from spmdrules.engine.masks import carry, plain
from spmdrules.engine.registry import A, T, register_rule
from spmdrules.engine.rulekit import attr, normalise_axis

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ShapeOp:
    """One shape op: its transformations in both directions."""

    #: (x shape, *attrs) -> (transformation x -> out, out shape)
    forward: Callable[..., tuple[Transformation, Shape]]
    #: (x shape, out shape, *attrs) -> transformation out -> x
    reverse: Callable[..., Transformation]


def shape_op_forward(op: ShapeOp, x: TensorSpec, *attrs: Any) -> SpmdInfo:
    trans, _ = op.forward(x.shape, *attrs)
    masked = x.attr.mask_items
    if masked:
        x, given = plain(x), x
    a = x.attr
    in_m, out_m = dim_trans.infer(trans, x.shape, a.multi_dims_mapping, a.mesh.shape)
    info = SpmdInfo([attr(x, in_m, a.partial_items)], [attr(x, out_m, a.partial_items)])
    if not masked:
        return info
    # a mask stays on a dim the op moves whole (``spmdrules.engine.masks``); the other output
    # dims are pieces or merges of input dims, whose slices may gather several owners
    x_letters = "".join(chr(ord("a") + i) for i in range(x.ndim))
    out_letters = "".join(x_letters[t.dim] if isinstance(t, InputDim) else chr(ord("A") + j)
                          for j, t in enumerate(trans))
    return carry(info, [(given, x_letters)], [out_letters])


def shape_op_reverse(op: ShapeOp, x: TensorSpec, out: TensorSpec, *attrs: Any) -> SpmdInfo:
    return reverse_variant(op, x, out, attrs, checked=True, x_own_partial=False)


def reverse_variant(
    op: ShapeOp,
    x: TensorSpec,
    out: TensorSpec,
    attrs: tuple[Any, ...],
    *,
    checked: bool,
    x_own_partial: bool,
) -> SpmdInfo:
    """Reverse inference; ``checked=False, x_own_partial=True`` is Paddle 3.3.1's reshape reverse
    (kept to recognise its answers), ``True, False`` ours."""
    _, out_shape = op.forward(x.shape, *attrs)
    if out.shape != out_shape:
        raise RuleArgumentError(
            f"'out' has shape {list(out.shape)} but 'x' of shape {list(x.shape)} gives "
            f"{list(out_shape)}; pass the op's real output"
        )
    trans = op.reverse(x.shape, out.shape, *attrs)
    a = out.attr
    out_m, in_m = dim_trans.infer(
        trans, out.shape, a.multi_dims_mapping, a.mesh.shape, checked=checked,
        coshard_splits=False,
    )
    # x pending the same reduction as out is what a local reshape turns into out
    x_part = x.attr.partial_items if x_own_partial else a.partial_items
    return SpmdInfo([attr(x, in_m, x_part)], [attr(out, out_m, a.partial_items)])


# ---- reshape ------------------------------------------------------------------------------------
def _required(name: str, value: tuple[int, ...] | None) -> tuple[int, ...]:
    if value is None:
        raise RuleArgumentError(f"attribute {name!r} is required")
    return value


def _reshape_forward(x_shape: Shape, shape: tuple[int, ...] | None) -> tuple[Transformation, Shape]:
    return dim_trans.reshape_plan(x_shape, _required("shape", shape))


def _reshape_reverse(x_shape: Shape, out_shape: Shape, shape: tuple[int, ...] | None) -> Transformation:
    return dim_trans.make_reshape_trans(out_shape, x_shape)


RESHAPE = ShapeOp(_reshape_forward, _reshape_reverse)


# ---- flatten: a reshape forward; reverse splits the merged dim back into its input dims ---------
def _flatten_axes(x_shape: Shape, start_axis: int, stop_axis: int) -> tuple[int, int]:
    n = max(len(x_shape), 1)
    start = normalise_axis("flatten", "x", start_axis, n)
    stop = normalise_axis("flatten", "x", stop_axis, n)
    if start > stop:
        raise RuleArgumentError(
            f"start_axis {start_axis} comes after stop_axis {stop_axis} in 'x' of rank "
            f"{len(x_shape)}; give start_axis <= stop_axis"
        )
    return start, stop


def _flatten_forward(x_shape: Shape, start_axis: int, stop_axis: int) -> tuple[Transformation, Shape]:
    start, stop = _flatten_axes(x_shape, start_axis, stop_axis)
    if not x_shape:
        return (SINGLETON,), (1,)
    merged = 1
    for n in x_shape[start : stop + 1]:
        merged *= n
    out_shape = (*x_shape[:start], merged, *x_shape[stop + 1 :])
    return dim_trans.make_reshape_trans(x_shape, out_shape), out_shape


def _flatten_reverse(x_shape: Shape, out_shape: Shape, start_axis: int, stop_axis: int) -> Transformation:
    start, stop = _flatten_axes(x_shape, start_axis, stop_axis)
    if not x_shape:
        return ()
    pieces = x_shape[start : stop + 1]
    merged = InputDim(start)
    return (
        *(InputDim(i) for i in range(start)),
        *(dim_trans.split(merged, pieces, k) for k in range(len(pieces))),
        *(InputDim(i - (stop - start)) for i in range(stop + 1, len(x_shape))),
    )


FLATTEN = ShapeOp(_flatten_forward, _flatten_reverse)


# ---- squeeze: size-1 dims named in axis (all size-1 dims when axis is empty) disappear ----------
def _squeezed(x_shape: Shape, axis: tuple[int, ...] | None) -> frozenset[int]:
    if not axis:
        return frozenset(i for i, n in enumerate(x_shape) if n == 1)
    n = len(x_shape)
    axes = (normalise_axis("squeeze", "x", a, max(n, 1)) for a in axis)
    return frozenset(a for a in axes if a < n and x_shape[a] == 1)


def _squeeze_forward(x_shape: Shape, axis: tuple[int, ...] | None) -> tuple[Transformation, Shape]:
    gone = _squeezed(x_shape, axis)
    trans: list[DimTrans] = []
    out_shape: list[int] = []
    for i, n in enumerate(x_shape):
        if i in gone:
            continue
        trans.append(SINGLETON if n == 1 else InputDim(i))
        out_shape.append(n)
    return tuple(trans), tuple(out_shape)


def _squeeze_reverse(x_shape: Shape, out_shape: Shape, axis: tuple[int, ...] | None) -> Transformation:
    gone = _squeezed(x_shape, axis)
    trans: list[DimTrans] = []
    j = 0
    for i, n in enumerate(x_shape):
        trans.append(SINGLETON if n == 1 else InputDim(j))
        if i not in gone:
            j += 1
    return tuple(trans)


SQUEEZE = ShapeOp(_squeeze_forward, _squeeze_reverse)


# ---- unsqueeze: size-1 dims appear at the output positions in axis ------------------------------
def inserted_axes(x_ndim: int, axis: tuple[int, ...] | None) -> frozenset[int]:
    """The output positions of the new dims, inserted one after another as paddle.unsqueeze does
    (a negative axis counts from the end of the rank reached so far)."""
    axes = _required("axis", axis)
    rank = x_ndim
    new: list[int] = []
    for a in axes:
        p = normalise_axis("unsqueeze", "x", a, rank, allow_end=True)
        new = [q + 1 if q >= p else q for q in new]
        new.append(p)
        rank += 1
    return frozenset(new)


def _unsqueeze_forward(x_shape: Shape, axis: tuple[int, ...] | None) -> tuple[Transformation, Shape]:
    new = inserted_axes(len(x_shape), axis)
    trans: list[DimTrans] = []
    out_shape: list[int] = []
    j = 0
    for i in range(len(x_shape) + len(new)):
        if i in new:
            trans.append(SINGLETON)
            out_shape.append(1)
        else:
            n = x_shape[j]
            trans.append(SINGLETON if n == 1 else InputDim(j))
            out_shape.append(n)
            j += 1
    return tuple(trans), tuple(out_shape)


def _unsqueeze_reverse(x_shape: Shape, out_shape: Shape, axis: tuple[int, ...] | None) -> Transformation:
    new = inserted_axes(len(x_shape), axis)
    return tuple(
        SINGLETON if n == 1 else InputDim(i)
        for i, n in enumerate(out_shape)
        if i not in new
    )


UNSQUEEZE = ShapeOp(_unsqueeze_forward, _unsqueeze_reverse)


# ---- registration -------------------------------------------------------------------------------
def _register(names: tuple[str, ...], op: ShapeOp, attrs: list[Any], doc: str) -> None:
    for name in names:
        register_rule(
            name,
            forward=functools.partial(shape_op_forward, op),
            reverse=functools.partial(shape_op_reverse, op),
            inputs=[T("x")],
            outputs=[T("out")],
            attrs=attrs,
            doc=doc,
            masks=True,
        )
    mark_derived(names, "dim_trans")


_register(("reshape", "reshape2"), RESHAPE, [A("shape", "ints", None)],
          "ReshapeInferSpmd: DimTrans of the greedy reshape matching; partials pass through.")
_register(("flatten",), FLATTEN, [A("start_axis", "int", 0), A("stop_axis", "int", -1)],
          "FlattenInferSpmd: reshape to the merged shape; reverse splits the merged dim; partials "
          "pass through.")
_register(("squeeze",), SQUEEZE, [A("axis", "ints", ())],
          "SqueezeInferSpmd: size-1 dims in axis (all when empty) disappear; partials pass through.")
_register(("unsqueeze", "unsqueeze2"), UNSQUEEZE, [A("axis", "ints", None)],
          "UnsqueezeInferSpmd: size-1 dims appear at the output positions in axis; partials pass "
          "through.")
