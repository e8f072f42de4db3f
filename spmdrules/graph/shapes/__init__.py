"""Shape and dtype inference for every graph op, following numpy's and Paddle's semantics.

The table ``SHAPE_RULES`` maps each op name to one ``ShapeRule``: a shape function shared by the
whole family (broadcast, matmul, reduce, reshape, ...) and a dtype policy. Aliases are rows of the
table, not functions. A shape function receives the op's tensor arguments in the order of the
op's registered Rule (``TensorMeta``, ``None`` for an absent optional, a tuple for a list) and the
bound attributes by name; it returns one entry per registered output (a tuple for a list output).

Bad shapes raise ``ShapeError`` naming the op node, the tensor argument and the dim.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import numpy as np

from spmdrules.core.spec import flat_slots
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
_INTEGRAL: Final = frozenset({"bool", "int8", "int16", "int32", "int64", "uint8"})


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


# ---- helpers ----------------------------------------------------------------------------------
def _t(args: Sequence[Arg], i: int) -> TensorMeta:
    a = args[i]
    assert isinstance(a, TensorMeta)  # the graph binds args against the rule schema first
    return a


def _opt(args: Sequence[Arg], i: int) -> TensorMeta | None:
    a = args[i]
    assert a is None or isinstance(a, TensorMeta)
    return a


def _vec(args: Sequence[Arg], i: int) -> tuple[TensorMeta, ...]:
    a = args[i]
    assert isinstance(a, tuple) and not isinstance(a, TensorMeta)
    return a



def _numel(shape: Iterable[int]) -> int:
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
        if all(d in _INTEGRAL for d in others):
            return "bfloat16"
        rest = promote(others)
        return "float32" if rest == "float16" else rest
    return str(np.result_type(*uniq))


# ---- dtype policies ---------------------------------------------------------------------------
def _same(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    return (flat_slots(args, TensorMeta)[0].dtype,)


def _promoted(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    return (promote([t.dtype for t in flat_slots(args, TensorMeta)]),)


def _const(*dtypes: str) -> DtypeFn:
    def fn(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
        return dtypes

    return fn


def _accumulate(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    # sum/prod of bool or ints accumulate in int64, as numpy (and paddle.sum) do
    d = _t(args, 0).dtype
    return ("int64" if d in _INTEGRAL else d,)


def _stat_dtype(d: str) -> str:
    # Paddle keeps normalisation statistics of half-precision inputs in float32
    return "float32" if d in ("float16", "bfloat16") else d


def _layer_norm_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    d = _t(args, 0).dtype
    return (d, _stat_dtype(d), _stat_dtype(d))


def _rms_norm_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    d = _t(args, 0).dtype
    return (d, _stat_dtype(d))


def _same_twice(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    d = _t(args, 0).dtype
    return (d, d)


def _embedding_dtype(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[str]:
    return (_t(args, 1).dtype,)


# ---- elementwise ------------------------------------------------------------------------------
def _unary(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    return (_t(args, 0).shape,)


def _binary(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, y = _t(args, 0), _t(args, 1)
    return (broadcast_shapes(ctx, [("x", x.shape), ("y", y.shape)]),)


def _swiglu(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, y = _t(args, 0), _opt(args, 1)
    if y is not None:
        if y.shape != x.shape:
            raise ctx.fail("y", f"shape {list(y.shape)} differs from x's {list(x.shape)}",
                           "give y the shape of x (swiglu(x, y) = silu(x) * y)")
        return (x.shape,)
    if not x.shape or x.shape[-1] % 2:
        raise ctx.fail("x", f"the last dim of shape {list(x.shape)} is not even",
                       "without y, swiglu splits x's last dim in two halves; make it even")
    return ((*x.shape[:-1], x.shape[-1] // 2),)


def _add_n(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    xs = _vec(args, 0)
    if not xs:
        raise ctx.fail("inputs", "the list is empty", "pass at least one tensor")
    for i, t in enumerate(xs[1:], 1):
        if t.shape != xs[0].shape:
            raise ctx.fail(f"inputs[{i}]", f"shape {list(t.shape)} differs from inputs[0]'s "
                           f"{list(xs[0].shape)}", "add_n sums tensors of one shape")
    return (xs[0].shape,)


# ---- matrix products --------------------------------------------------------------------------
def _matmul(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, y = _t(args, 0), _t(args, 1)
    for name, t in (("x", x), ("y", y)):
        if not t.shape:
            raise ctx.fail(name, "is 0-d", "matmul needs operands of rank >= 1; use multiply")
    xs, ys = list(x.shape), list(y.shape)
    # A 1-D operand is a row (x) or column (y) vector whose added dim leaves the result; Paddle
    # ignores the transpose flag of a 1-D operand, as numpy has none.
    if len(xs) == 1:
        xs = [1, xs[0]]
    elif attrs.get("trans_x", False):
        xs[-2], xs[-1] = xs[-1], xs[-2]
    if len(ys) == 1:
        ys = [ys[0], 1]
    elif attrs.get("trans_y", False):
        ys[-2], ys[-1] = ys[-1], ys[-2]
    if xs[-1] != ys[-2]:
        raise ctx.fail(
            "y",
            f"contracted dim has size {ys[-2]} but x's has size {xs[-1]} (x {list(x.shape)}, "
            f"y {list(y.shape)}, trans_x={attrs.get('trans_x', False)}, "
            f"trans_y={attrs.get('trans_y', False)})",
            "make x's last dim equal y's second-to-last, or set trans_x / trans_y",
        )
    batch = broadcast_shapes(ctx, [("x", tuple(xs[:-2])), ("y", tuple(ys[:-2]))])
    out = list(batch)
    if len(x.shape) > 1:
        out.append(xs[-2])
    if len(y.shape) > 1:
        out.append(ys[-1])
    return (tuple(out),)


def _bmm(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, y = _t(args, 0), _t(args, 1)
    for name, t in (("x", x), ("y", y)):
        if len(t.shape) != 3:
            raise ctx.fail(name, f"has rank {len(t.shape)}", "bmm takes 3-D [batch, m, k] @ [batch, k, n]")
    if x.shape[0] != y.shape[0]:
        raise ctx.fail("y", f"dim 0 (batch) has size {y.shape[0]} but x's has {x.shape[0]}",
                       "give both operands the same batch size")
    if x.shape[2] != y.shape[1]:
        raise ctx.fail("y", f"dim 1 has size {y.shape[1]} but x's dim 2 has {x.shape[2]}",
                       "the contracted dims must match")
    return ((x.shape[0], x.shape[1], y.shape[2]),)


_ELLIPSIS_LETTERS: Final = "0123456789"  # internal labels of ellipsis dims (never user letters)


def _einsum(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    xs = _vec(args, 0)
    eq = str(attrs.get("equation", "")).replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(xs):
        raise ctx.fail("equation", f"{eq!r} has {len(terms)} operand terms but {len(xs)} "
                       "operands were given", "write one comma-separated term per operand")
    sizes: dict[str, int] = {}
    ell_ndim = 0
    expanded: list[str] = []
    for k, (term, t) in enumerate(zip(terms, xs, strict=True)):
        name = f"inputs[{k}]"
        letters = term.replace("...", "")
        if any(c not in string.ascii_letters for c in letters) or term.count("...") > 1:
            raise ctx.fail("equation", f"term {term!r} holds characters other than letters and one "
                           "'...'", "use letters a-z/A-Z and at most one '...' per term")
        if "..." in term:
            n_ell = len(t.shape) - len(letters)
            if n_ell < 0:
                raise ctx.fail(name, f"has rank {len(t.shape)} but term {term!r} names "
                               f"{len(letters)} dims", "drop letters or pass a higher-rank operand")
            ell_ndim = max(ell_ndim, n_ell)
            pre, post = term.split("...")
            full = pre + _ELLIPSIS_LETTERS[10 - n_ell :] if n_ell else pre
            full += post
        else:
            if len(letters) != len(t.shape):
                raise ctx.fail(name, f"has rank {len(t.shape)} but term {term!r} names "
                               f"{len(letters)} dims", "write one letter per dim (or use '...')")
            full = letters
        expanded.append(full)
        for i, (c, n) in enumerate(zip(full, t.shape, strict=True)):
            old = sizes.get(c)
            if old is None or old == 1:
                sizes[c] = n
            elif n not in (1, old):
                what = "an ellipsis dim" if c in _ELLIPSIS_LETTERS else f"letter {c!r}"
                raise ctx.fail(name, f"dim {i} ({what}) has size {n} but another operand gives "
                               f"it size {old}", "make the sizes equal (or 1 to broadcast)")
    ell = _ELLIPSIS_LETTERS[10 - ell_ndim :] if ell_ndim else ""
    if arrow:
        if rhs.count("...") > 1 or any(c not in string.ascii_letters for c in rhs.replace("...", "")):
            raise ctx.fail("equation", f"output {rhs!r} is not letters and one '...'",
                           "write the output as letters, with at most one '...'")
        out_labels = rhs.replace("...", ell)
        for c in rhs.replace("...", ""):
            if c not in sizes:
                raise ctx.fail("equation", f"output letter {c!r} appears in no operand",
                               "name only letters of the operands in the output")
            if rhs.count(c) > 1:
                raise ctx.fail("equation", f"output letter {c!r} repeats",
                               "name each output letter once")
    else:
        # numpy's implicit output: the ellipsis dims, then letters used exactly once, sorted
        counts: dict[str, int] = {}
        for term in terms:
            for c in term.replace("...", ""):
                counts[c] = counts.get(c, 0) + 1
        out_labels = ell + "".join(sorted(c for c, n in counts.items() if n == 1))
    return (tuple(sizes.get(c, 1) for c in out_labels),)


# ---- reductions -------------------------------------------------------------------------------
def _reduced(ctx: ShapeContext, x: TensorMeta, axes: Sequence[int] | None, keep: bool) -> Shape:
    """``axes`` empty or None reduces every dim (Paddle's ``axis=[]``)."""
    nd = len(x.shape)
    if not axes:
        gone = set(range(nd))
    else:
        gone = set()
        for a in axes:
            d = ctx.axis("x", a, max(nd, 1))
            if nd == 0:
                continue
            if d in gone:
                raise ctx.fail("x", f"axis {a} is listed twice in {list(axes)}", "list each axis once")
            gone.add(d)
    return tuple(1 if i in gone else n for i, n in enumerate(x.shape) if keep or i not in gone)


def _reduce(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    return (_reduced(ctx, _t(args, 0), attrs.get("axis"), bool(attrs.get("keep_dim", False))),)


def _logsumexp(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    # Paddle 3.3.1's op reads only axis: reduce_all=True does not widen it
    # (paddle._C_ops.logsumexp(x, [0], False, True) keeps every other dim).
    axes = attrs.get("axis")
    return (_reduced(ctx, _t(args, 0), axes, bool(attrs.get("keepdims", False))),)


def _p_norm(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = _t(args, 0)
    keep = bool(attrs.get("keepdims", False))
    if attrs.get("asvector", False):
        return (_reduced(ctx, x, (), keep),)
    return (_reduced(ctx, x, (int(attrs.get("axis", -1)),), keep),)


def _mean_all(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    return ((),)


def _arg_reduce(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = _t(args, 0)
    keep = bool(attrs.get("keepdims", False))
    if attrs.get("flatten", False):
        return (_reduced(ctx, x, (), keep),)
    if not x.shape:
        return ((),)
    return (_reduced(ctx, x, (int(attrs.get("axis", -1)),), keep),)


# ---- shape ops --------------------------------------------------------------------------------
def _reshape(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = _t(args, 0)
    tgt = attrs.get("shape")
    if tgt is None:
        raise ctx.fail("shape", "the attribute is missing", "pass the target shape, e.g. shape=[0, -1]")
    out = list(tgt)
    infer_at = -1
    for i, n in enumerate(tgt):
        if n == 0:
            # Paddle: 0 copies the input dim at the same position
            if i >= len(x.shape):
                raise ctx.fail("shape", f"entry {i} is 0 (copy x's dim {i}) but x has rank "
                               f"{len(x.shape)}", "give the size explicitly")
            out[i] = x.shape[i]
        elif n == -1:
            if infer_at >= 0:
                raise ctx.fail("shape", f"entries {infer_at} and {i} are both -1",
                               "only one size can be inferred")
            infer_at = i
        elif n < 0:
            raise ctx.fail("shape", f"entry {i} is {n}", "sizes are >= 0, or -1 to infer one")
    numel = _numel(x.shape)
    if infer_at >= 0:
        known = _numel(n for i, n in enumerate(out) if i != infer_at)
        if known == 0 or numel % known:
            raise ctx.fail("shape", f"{list(tgt)} cannot hold x's {numel} elements ({list(x.shape)})",
                           "the known sizes must divide the element count")
        out[infer_at] = numel // known
    elif _numel(out) != numel:
        raise ctx.fail("shape", f"{list(tgt)} holds {_numel(out)} elements but x {list(x.shape)} "
                       f"holds {numel}", "the sizes must multiply to the same count")
    return (tuple(out),)


def _flatten(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = _t(args, 0)
    if not x.shape:
        return ((1,),)  # Paddle flattens a 0-d tensor to [1]
    nd = len(x.shape)
    start = ctx.axis("x", int(attrs.get("start_axis", 0)), nd, "start_axis")
    stop = ctx.axis("x", int(attrs.get("stop_axis", -1)), nd, "stop_axis")
    if start > stop:
        raise ctx.fail("x", f"start_axis {start} comes after stop_axis {stop}",
                       "give start_axis <= stop_axis")
    return ((*x.shape[:start], _numel(x.shape[start : stop + 1]), *x.shape[stop + 1 :]),)


def _squeeze(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = _t(args, 0)
    axes = attrs.get("axis") or ()
    nd = len(x.shape)
    if not axes:
        gone = {i for i, n in enumerate(x.shape) if n == 1}
    else:
        # Paddle (unlike numpy) skips a listed axis whose size is not 1
        gone = set()
        for a in axes:
            d = ctx.axis("x", a, max(nd, 1))
            if d < nd and x.shape[d] == 1:
                gone.add(d)
    return (tuple(n for i, n in enumerate(x.shape) if i not in gone),)


def _unsqueeze(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = _t(args, 0)
    axes = attrs.get("axis")
    if axes is None:
        raise ctx.fail("axis", "the attribute is missing", "pass the new dims, e.g. axis=[0]")
    out = list(x.shape)
    # Paddle inserts one axis after another; a negative axis counts from the rank reached so far
    for a in axes:
        p = ctx.axis("x", a, len(out), end=True)
        out.insert(p, 1)
    return (tuple(out),)


def _transpose(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = _t(args, 0)
    perm = attrs.get("perm")
    nd = len(x.shape)
    if perm is None or len(perm) != nd:
        raise ctx.fail("perm", f"{None if perm is None else list(perm)} does not list the "
                       f"{nd} dims of x {list(x.shape)}", f"give a permutation of 0..{nd - 1}")
    norm = [ctx.axis("x", p, nd, "perm entry") for p in perm]
    if sorted(norm) != list(range(nd)):
        raise ctx.fail("perm", f"{list(perm)} is not a permutation", f"list each of 0..{nd - 1} once")
    return (tuple(x.shape[p] for p in norm),)


# ---- concat / split / stack -------------------------------------------------------------------
def _concat(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    xs = _vec(args, 0)
    if not xs:
        raise ctx.fail("x", "the list is empty", "pass at least one tensor")
    s0 = xs[0].shape
    ax = ctx.axis("x[0]", int(attrs.get("axis", 0)), len(s0))
    total = 0
    for k, t in enumerate(xs):
        if len(t.shape) != len(s0):
            raise ctx.fail(f"x[{k}]", f"has rank {len(t.shape)} but x[0] has rank {len(s0)}",
                           "concatenate tensors of one rank")
        for i, (a, b) in enumerate(zip(t.shape, s0, strict=True)):
            if i != ax and a != b:
                raise ctx.fail(f"x[{k}]", f"dim {i} has size {a} but x[0]'s has {b}",
                               f"only the concat axis {ax} may differ")
        total += t.shape[ax]
    return ((*s0[:ax], total, *s0[ax + 1 :]),)


def _split(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = _t(args, 0)
    ax = ctx.axis("x", int(attrs.get("axis", 0)), len(x.shape))
    n = x.shape[ax]
    sections = list(attrs.get("sections") or ())
    if not sections:
        raise ctx.fail("sections", "is empty", "give the size of every piece, e.g. [2, 2, -1]")
    if sections.count(-1) > 1 or any(s < -1 for s in sections):
        raise ctx.fail("sections", f"{sections} has sizes below -1 or more than one -1",
                       "give sizes >= 0 and at most one -1")
    if -1 in sections:
        rest = n - sum(s for s in sections if s != -1)
        if rest < 0:
            raise ctx.fail("x", f"dim {ax} has size {n}, less than the sections {sections}",
                           "shrink the sections")
        sections[sections.index(-1)] = rest
    if sum(sections) != n:
        raise ctx.fail("x", f"dim {ax} has size {n} but the sections {sections} sum to "
                       f"{sum(sections)}", "make the sections add up to the dim")
    return ([(*x.shape[:ax], s, *x.shape[ax + 1 :]) for s in sections],)


def _split_with_num(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = _t(args, 0)
    ax = ctx.axis("x", int(attrs.get("axis", 0)), len(x.shape))
    num = int(attrs.get("num", 1))
    if num <= 0 or x.shape[ax] % num:
        raise ctx.fail("x", f"dim {ax} has size {x.shape[ax]}, not divisible into num={num} "
                       "pieces", "pick a num that divides the dim, or use split with sections")
    piece = (*x.shape[:ax], x.shape[ax] // num, *x.shape[ax + 1 :])
    return ([piece] * num,)


def _unbind(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = _t(args, 0)
    ax = ctx.axis("x", int(attrs.get("axis", 0)), len(x.shape))
    piece = (*x.shape[:ax], *x.shape[ax + 1 :])
    return ([piece] * x.shape[ax],)


def _stack(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    xs = _vec(args, 0)
    if not xs:
        raise ctx.fail("x", "the list is empty", "pass at least one tensor")
    s0 = xs[0].shape
    for k, t in enumerate(xs[1:], 1):
        if t.shape != s0:
            raise ctx.fail(f"x[{k}]", f"shape {list(t.shape)} differs from x[0]'s {list(s0)}",
                           "stack tensors of one shape")
    ax = ctx.axis("x[0]", int(attrs.get("axis", 0)), len(s0), end=True)
    return ((*s0[:ax], len(xs), *s0[ax:]),)


# ---- softmax, norms, embedding, cross entropy -------------------------------------------------
def _softmax(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = _t(args, 0)
    if x.shape:
        ctx.axis("x", int(attrs.get("axis", -1)), len(x.shape))
    return (x.shape,)


def _layer_norm(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x = _t(args, 0)
    nd = len(x.shape)
    bna = int(attrs.get("begin_norm_axis", 1))
    if not 0 <= bna < nd:
        raise ctx.fail("x", f"begin_norm_axis {bna} is out of range for rank {nd}",
                       f"use 0..{nd - 1} (the first normalised dim)")
    size = _numel(x.shape[bna:])
    for k, name in ((1, "scale"), (2, "bias")):
        p = _opt(args, k)
        if p is not None and p.shape != (size,):
            raise ctx.fail(name, f"has shape {list(p.shape)} but x's normalised dims "
                           f"{list(x.shape[bna:])} need [{size}]", f"give {name} shape [{size}]")
    stat = x.shape[:bna]
    return (x.shape, stat, stat)


def _rms_norm(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, scale = _t(args, 0), _t(args, 1)
    if not x.shape:
        raise ctx.fail("x", "is 0-d", "rms norm normalises the last dim; pass rank >= 1")
    if scale.shape != x.shape[-1:]:
        raise ctx.fail("scale", f"has shape {list(scale.shape)} but x's last dim needs "
                       f"[{x.shape[-1]}]", f"give scale shape [{x.shape[-1]}]")
    return (x.shape, x.shape[:-1])


def _embedding(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, w = _t(args, 0), _t(args, 1)
    if len(w.shape) != 2:
        raise ctx.fail("weight", f"has rank {len(w.shape)}", "the table is 2-D [vocab, hidden]")
    if x.dtype not in _INTEGRAL or x.dtype == "bool":
        raise ctx.fail("x", f"has dtype {x.dtype}", "ids are integers; use int64 or int32")
    return ((*x.shape, w.shape[1]),)


def _cross_entropy(ctx: ShapeContext, args: Sequence[Arg], attrs: Mapping[str, Any]) -> Sequence[OutShape]:
    x, label = _t(args, 0), _t(args, 1)
    if not x.shape:
        raise ctx.fail("x", "is 0-d", "cross entropy needs a class axis")
    ax = ctx.axis("x", int(attrs.get("axis", -1)), len(x.shape))
    loss = (*x.shape[:ax], 1, *x.shape[ax + 1 :])
    if attrs.get("soft_label", False):
        if label.shape != x.shape:
            raise ctx.fail("label", f"has shape {list(label.shape)} but soft labels need x's "
                           f"{list(x.shape)}", "give one probability per class")
    else:
        if label.shape != loss:
            raise ctx.fail("label", f"has shape {list(label.shape)} but hard labels need "
                           f"{list(loss)} (x's shape with size 1 on the class axis {ax})",
                           "unsqueeze the labels on the class axis")
        if label.dtype not in _INTEGRAL or label.dtype == "bool":
            raise ctx.fail("label", f"has dtype {label.dtype}", "hard labels are int64 class ids")
    return (x.shape, loss)


# ---- the table --------------------------------------------------------------------------------
UNARY_OPS: Final = (
    "abs", "acos", "acosh", "asin", "asinh", "assign", "atan", "atanh", "bernoulli", "bitwise_not",
    "ceil", "celu", "clip", "conj", "cos", "cosh", "digamma", "dropout", "elementwise_unary", "elu",
    "erf", "erfinv", "exp", "expm1", "fill", "floor", "gelu", "hardshrink", "hardsigmoid",
    "hardswish", "hardtanh", "leaky_relu", "lgamma", "log", "log10", "log1p", "log2", "logit",
    "logsigmoid", "mish", "poisson", "pow", "reciprocal", "relu", "relu6", "round", "rsqrt",
    "scale", "selu", "sigmoid", "sign", "silu", "sin", "sinh", "softplus", "softshrink",
    "softsign", "sqrt", "square", "stanh", "swish", "tan", "tanh", "tanh_shrink",
    "thresholded_relu", "trunc",
)
BINARY_OPS: Final = (
    "add", "bitwise_and", "bitwise_or", "bitwise_xor", "divide", "elementwise_add",
    "elementwise_binary", "elementwise_div", "elementwise_mul", "elementwise_pow", "floor_divide",
    "fmax", "fmin", "heaviside", "maximum", "minimum", "multiply", "remainder", "subtract",
    "trunc_divide",
)
PREDICATE_OPS: Final = (
    "equal", "greater_equal", "greater_than", "less_equal", "less_than", "logical_and",
    "logical_or", "logical_xor", "not_equal",
)
REDUCE_SAME_OPS: Final = (
    "amax", "amin", "frobenius_norm", "max", "min", "reduce_base", "reduce_max",
    "squared_l2_norm",
)
REDUCE_ACCUMULATE_OPS: Final = ("prod", "reduce_sum", "sum")
REDUCE_BOOL_OPS: Final = ("all", "any")
#: rules over arbitrary ops: the caller declares the results (shape inference cannot know them)
GENERIC_OPS: Final = ("default_", "default_data_parallel", "replicated")


def _rows() -> dict[str, ShapeRule]:
    same = _same
    rows: dict[str, ShapeRule] = {}

    def put(names: Sequence[str], shape: ShapeFn, dtype: DtypeFn, family: str) -> None:
        for n in names:
            rows[n] = ShapeRule(shape, dtype, family)

    put(UNARY_OPS, _unary, same, "elementwise_unary")
    put(("logical_not",), _unary, _const("bool"), "elementwise_unary")
    put(BINARY_OPS, _binary, _promoted, "elementwise_binary")
    put(PREDICATE_OPS, _binary, _const("bool"), "elementwise_binary")
    put(("swiglu",), _swiglu, _promoted, "elementwise_binary")
    put(("add_n",), _add_n, _promoted, "elementwise_binary")
    put(("matmul", "matmul_v2"), _matmul, _promoted, "matmul")
    put(("bmm",), _bmm, _promoted, "matmul")
    put(("einsum",), _einsum, _promoted, "matmul")
    put(REDUCE_SAME_OPS, _reduce, same, "reduction")
    put(REDUCE_ACCUMULATE_OPS, _reduce, _accumulate, "reduction")
    put(REDUCE_BOOL_OPS, _reduce, _const("bool"), "reduction")
    put(("logsumexp",), _logsumexp, same, "reduction")
    put(("p_norm",), _p_norm, same, "reduction")
    put(("mean_all",), _mean_all, same, "reduction")
    put(("argmax", "argmin"), _arg_reduce, _const("int64"), "reduction")
    put(("reshape", "reshape2"), _reshape, same, "shape")
    put(("flatten",), _flatten, same, "shape")
    put(("squeeze",), _squeeze, same, "shape")
    put(("unsqueeze", "unsqueeze2"), _unsqueeze, same, "shape")
    put(("transpose", "transpose2"), _transpose, same, "shape")
    put(("concat",), _concat, _promoted, "concat_split")
    put(("split",), _split, same, "concat_split")
    put(("split_with_num",), _split_with_num, same, "concat_split")
    put(("unbind",), _unbind, same, "concat_split")
    put(("stack",), _stack, _promoted, "concat_split")
    put(("softmax", "log_softmax"), _softmax, same, "softmax")
    put(("layer_norm",), _layer_norm, _layer_norm_dtype, "norm")
    put(("fused_rms_norm",), _rms_norm, _rms_norm_dtype, "norm")
    put(("embedding", "lookup_table_v2"), _embedding, _embedding_dtype, "embedding")
    put(("cross_entropy_with_softmax", "softmax_with_cross_entropy"), _cross_entropy, _same_twice,
        "cross_entropy")
    return rows


SHAPE_RULES: Final[Mapping[str, ShapeRule]] = _rows()


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
    rule = SHAPE_RULES.get(op_type)
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
