"""The contract of shape inference: ``TensorMeta``, ``ShapeRule``, the table and ``infer_meta``.

The table ``SHAPE_RULES`` maps each op name to one ``ShapeRule``: a shape function shared by the
whole family (broadcast, matmul, reduce, reshape, ...) and a dtype policy. Each family module of
this package adds its rows with ``register``; aliases are rows, not functions. A shape
function receives the op's tensor arguments in the order of the op's registered Rule
(``TensorMeta``, ``None`` for an absent optional, a tuple for a list) and the bound attributes by
name; it returns one entry per registered output (a tuple for a list output).

Bad shapes raise ``ShapeError`` naming the op node, the tensor argument and the dim.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import numpy as np

from spmdrules.core.spec import flat_slots
from spmdrules.core.tables import OpTable, caller
from spmdrules.graph.errors import ShapeError

Shape = tuple[int, ...]


class TensorMeta(NamedTuple):
    """What shape inference knows about a tensor: its global shape and dtype name."""

    shape: Shape
    dtype: str


Arg = TensorMeta | None | tuple[TensorMeta, ...]
OutShape = Shape | list[Shape]  # a list output gives a list of shapes
OutMeta = TensorMeta | tuple[TensorMeta, ...]

# dtype names a graph tensor may carry (numpy's spelling, plus bfloat16 which numpy lacks)
#: bytes per element, for the bytes a reshard moves
DTYPE_BYTES: Final[Mapping[str, int]] = {
    "bool": 1, "int8": 1, "uint8": 1, "int16": 2, "float16": 2, "bfloat16": 2, "int32": 4,
    "float32": 4, "int64": 8, "float64": 8, "complex64": 8, "complex128": 16,
}
DTYPES: Final = frozenset(DTYPE_BYTES)
INTEGRAL_DTYPES: Final = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8"})


class ShapeContext:
    """Names the op node in every error, so a failure deep in a family says which node failed."""

    __slots__ = ("node", "op_type")

    def __init__(self, node: str, op_type: str) -> None:
        self.node = node
        self.op_type = op_type

    def fail(self, tensor: str, why: str, fix: str) -> ShapeError:
        return ShapeError(f"op {self.node!r} ({self.op_type}): {tensor}: {why}; {fix}")

    def axis(self, tensor: str, axis: int, ndim: int, attr: str = "axis", *, end: bool = False) -> int:
        """Normalise ``axis`` for a tensor of rank ``ndim`` (one past the end when ``end``)."""
        hi = ndim + 1 if end else ndim
        if not -hi <= axis < hi or hi == 0:
            raise self.fail(
                tensor,
                f"{attr} {axis} is out of range for rank {ndim}",
                f"use {-hi}..{hi - 1}" if hi else "this op needs a tensor of rank >= 1",
            )
        return axis + hi if axis < 0 else axis


ShapeFn = Callable[[ShapeContext, Sequence[Arg], Mapping[str, Any]], Sequence[OutShape]]
DtypeFn = Callable[[ShapeContext, Sequence[Arg], Mapping[str, Any]], Sequence[str]]


@dataclass(frozen=True, slots=True)
class ShapeRule:
    """One row of the table: how an op's output shapes and dtypes follow from its arguments."""

    shape: ShapeFn
    dtype: DtypeFn
    family: str


def tensor_arg(args: Sequence[Arg], i: int) -> TensorMeta:
    a = args[i]
    assert isinstance(a, TensorMeta)  # the graph binds args against the rule schema first
    return a


def optional_arg(args: Sequence[Arg], i: int) -> TensorMeta | None:
    a = args[i]
    assert a is None or isinstance(a, TensorMeta)
    return a


def list_arg(args: Sequence[Arg], i: int) -> tuple[TensorMeta, ...]:
    a = args[i]
    assert isinstance(a, tuple) and not isinstance(a, TensorMeta)
    return a


def numel(shape: Iterable[int]) -> int:
    return math.prod(shape)


def broadcast_shapes(ctx: ShapeContext, named: Sequence[tuple[str, Shape]]) -> Shape:
    """numpy broadcasting, right-aligned; the error names both tensors and the clashing dim."""
    ndim = max((len(s) for _, s in named), default=0)
    out = [1] * ndim
    owner = [""] * ndim
    for name, s in named:
        off = ndim - len(s)
        for i, n in enumerate(s):
            j = off + i
            if n == out[j] or n == 1:
                continue
            if out[j] == 1:
                out[j] = n
                owner[j] = name
                continue
            raise ctx.fail(
                name,
                f"dim {i} has size {n} but {owner[j]} has size {out[j]} at the same "
                f"(right-aligned) position, and neither is 1",
                "make the sizes equal or 1 so they broadcast",
            )
    return tuple(out)


def promote(dtypes: Sequence[str]) -> str:
    """The common dtype of several tensors: numpy's promotion, with bfloat16 between the ints and
    float32 (bfloat16 with float16 gives float32, as Paddle promotes)."""
    uniq = list(dict.fromkeys(dtypes))
    if len(uniq) == 1:
        return uniq[0]
    if "bfloat16" in uniq:
        others = [d for d in uniq if d != "bfloat16"]
        if all(d in INTEGRAL_DTYPES for d in others):
            return "bfloat16"
        rest = promote(others)
        return "float32" if rest == "float16" else rest
    return str(np.result_type(*uniq))


def same_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    return (flat_slots(args, TensorMeta)[0].dtype,)


def promoted_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    return (promote([t.dtype for t in flat_slots(args, TensorMeta)]),)


def const_dtype(*dtypes: str) -> DtypeFn:
    def fn(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
        return dtypes

    return fn


#: rules over arbitrary ops: the caller declares the results (shape inference cannot know them)
GENERIC_OPS: Final = ("default_", "default_data_parallel", "replicated")


#: op name -> ShapeRule; each family module adds its rows with ``register``
SHAPE_RULES: Final[OpTable[ShapeRule]] = OpTable("shape rule")


def register(names: Sequence[str], shape: ShapeFn, dtype: DtypeFn, *, family: str | None = None,
             origin: str | None = None) -> None:
    """Add one row per op name; the row's family defaults to the module that defines ``shape``.
    A name with a row already raises ``DuplicateRegistrationError``."""
    row = ShapeRule(shape, dtype, family or shape.__module__.rsplit(".", 1)[-1])
    SHAPE_RULES.add_all(names, row, origin if origin is not None else caller(1))


def has_shape_rule(op_type: str) -> bool:
    return op_type in SHAPE_RULES or op_type in GENERIC_OPS


def infer(
    op_type: str,
    args: Sequence[Arg],
    attrs: Mapping[str, Any],
    *,
    node: str = "?",
) -> tuple[OutShape, ...]:
    """The output shapes of ``op_type`` on ``args``, with dtypes: see ``infer_meta``."""
    return tuple(o for o, _ in _infer(op_type, args, attrs, node))


def infer_meta(
    op_type: str,
    args: Sequence[Arg],
    attrs: Mapping[str, Any],
    *,
    node: str = "?",
) -> tuple[OutMeta, ...]:
    """One ``TensorMeta`` per registered output (a tuple of them for a list output).

    >>> infer_meta("matmul", [TensorMeta((8, 16), "float32"), TensorMeta((32, 16), "float32")],
    ...            {"trans_x": False, "trans_y": True})
    (TensorMeta(shape=(8, 32), dtype='float32'),)
    """
    out: list[OutMeta] = []
    for shape, dtype in _infer(op_type, args, attrs, node):
        if isinstance(shape, list):
            out.append(tuple(TensorMeta(s, dtype) for s in shape))
        else:
            out.append(TensorMeta(shape, dtype))
    return tuple(out)


def _infer(
    op_type: str, args: Sequence[Arg], attrs: Mapping[str, Any], node: str
) -> list[tuple[OutShape, str]]:
    rule = SHAPE_RULES.lookup(op_type)
    ctx = ShapeContext(node, op_type)
    if rule is None:
        raise ctx.fail(
            "op", f"has no shape inference ({op_type!r} is not in spmdrules.graph.shapes.SHAPE_RULES)",
            "add its family row to SHAPE_RULES, or build it with a generic rule "
            "(default_data_parallel / replicated) and declared result shapes",
        )
    shapes = rule.shape(ctx, args, attrs)
    dtypes = rule.dtype(ctx, args, attrs)
    if len(dtypes) != len(shapes):
        raise AssertionError(f"{op_type}: shape and dtype rows disagree on the output count")
    return list(zip(shapes, dtypes, strict=True))
