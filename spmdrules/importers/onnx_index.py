"""The ONNX indexing and layout ops onto registered ops: Gather, GatherND, GatherElements, Slice,
Split, Pad, Tile, Expand, TopK (converters registered into
:data:`~spmdrules.importers.onnx_ops.OPS`).

ONNX lets an index count from the end: a constant index is normalised here; an index computed
at run time is wrapped by graph ops (``where(i < 0, i + n, i)``), since the registered gathers
read positions 0..n-1 only (a position outside -n..n-1 stays an error of the kernel, as ONNX
says). Slice's starts and ends are clamped as ONNX clamps them; a negative step is a
``strided_slice`` with Paddle's ends (``-n - 1`` for "past the first element").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spmdrules.graph.nodes import Tensor
from spmdrules.importers.onnx_ops import Ctx, Value, int_list, onnx_op
from spmdrules.importers.onnx_values import Empty, Static


def _axis(c: Ctx, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise c.fail(f"{what} {axis} is out of range for an input of rank {rank}")
    return axis + rank if axis < 0 else axis


def _wrapped(c: Ctx, i: int, n: int | list[int], part: str) -> Tensor:
    """Index input ``i`` (positions along a dim of length ``n``; or, for GatherND, along the dims
    of lengths ``n`` that its last axis's entries name) with ONNX's negative positions counted
    from the end."""
    lengths = np.asarray(n, dtype=np.int64)
    v = c.static(i) if isinstance(c.imp.env.get(c.node.input[i]), Static) else None
    if v is not None:
        bad = (v < -lengths) | (v >= lengths)
        if bad.any():
            span = (f"-{n}..{n - 1}" if isinstance(n, int) else
                    f"-n..n - 1 for the lengths n = {n} it indexes")
            raise c.fail(f"index {c.node.input[i]!r} holds {int(v[bad].reshape(-1)[0])}, "
                         f"outside {span}")
        if not v.size or v.min() >= 0:
            return c.tensor(i)
        return Static(f"{c.node.output[0]}.{part}", np.where(v < 0, v + lengths, v)).tensor(
            c.imp)
    idx = c.tensor(i)
    zero = c.call("full", shape=[], value=0, dtype=idx.dtype, part=f"{part}.zero")
    length = Static(f"{c.node.output[0]}.{part}.n", lengths.astype(idx.dtype)).tensor(c.imp)
    negative = c.call("less_than", idx, zero, part=f"{part}.negative")
    return c.call("where", negative, c.call("add", idx, length, part=f"{part}.from_end"), idx,
                  part=part)


@onnx_op("Gather")
def _gather(c: Ctx) -> list[Value]:
    """``data`` indexed along ``axis`` by an index of any rank: an embedding lookup (a [V, H]
    floating table on axis 0: the vocabulary-parallel rule serves it), else ``index_select`` of
    the index flattened, reshaped to ``data[:axis] + index + data[axis + 1:]``. A bool or integer
    table (LLaMA's export gathers its attention mask, split on the batch) is never an embedding:
    the embedding rule leaves a split table's lookups a pending sum, which a bool cannot be."""
    x = c.tensor(0)
    ax = _axis(c, int(c.attr("axis", 0)), x.ndim)
    ishape = c.shape_of(1)
    idx = _wrapped(c, 1, x.shape[ax], "index")
    out = [*x.shape[:ax], *ishape, *x.shape[ax + 1:]]
    if ax == 0 and x.ndim == 2 and ishape and x.dtype.startswith(("float", "bfloat")):
        return [c.call("embedding", idx, x)]
    flat = idx if len(ishape) == 1 else c.call("reshape", idx, shape=[-1], part="flat")
    picked = c.call("index_select", x, flat, axis=ax, part="" if len(ishape) == 1 else "select")
    return [picked] if len(ishape) == 1 else [c.call("reshape", picked, shape=out)]


@onnx_op("GatherND")
def _gather_nd(c: Ctx) -> list[Value]:
    """``gather_nd``: the index's last axis names positions in ``data``'s leading dims (the
    dynamo exporter writes a mask's ``x[i, j]`` so); ``batch_dims`` other than 0 is refused."""
    if int(c.attr("batch_dims", 0)):
        raise c.fail(f"batch_dims {c.attr('batch_dims')}: only 0 is mapped (the registered "
                     "gather_nd indexes from the first dim)")
    x = c.tensor(0)
    k = c.shape_of(1)[-1] if c.shape_of(1) else 0
    if not 1 <= k <= x.ndim:
        raise c.fail(f"the index's last axis has {k} entries; it names 1 to {x.ndim} dims")
    return [c.call("gather_nd", x, _wrapped(c, 1, list(x.shape[:k]), "index"))]


@onnx_op("GatherElements")
def _gather_elements(c: Ctx) -> list[Value]:
    x = c.tensor(0)
    ax = _axis(c, int(c.attr("axis", 0)), x.ndim)
    return [c.call("take_along_axis", x, _wrapped(c, 1, x.shape[ax], "index"), axis=ax)]


def _slice_args(c: Ctx, rank: int) -> tuple[list[int], list[int], list[int], list[int]]:
    if c.opset < 10:
        starts, ends = int_list(c.attr("starts")), int_list(c.attr("ends"))
        axes = int_list(c.attr("axes", list(range(len(starts)))))
        steps = [1] * len(starts)
    else:
        starts, ends = c.ints(1, "starts"), c.ints(2, "ends")
        axes = c.ints(3, "axes") if c.has(3) else list(range(len(starts)))
        steps = c.ints(4, "steps") if c.has(4) else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise c.fail(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in "
                     "length")
    axes = [_axis(c, a, rank, "axes entry") for a in axes]
    if len(set(axes)) != len(axes) or 0 in steps:
        raise c.fail(f"axes {axes} repeat an axis or steps {steps} hold a 0")
    return starts, ends, axes, steps


@onnx_op("Slice")
def _slice(c: Ctx) -> list[Value]:
    x = c.tensor(0)
    starts, ends, axes, steps = _slice_args(c, x.ndim)
    kept: list[tuple[int, int, int, int]] = []
    shape = list(x.shape)
    for s, e, a, k in zip(starts, ends, axes, steps, strict=True):
        n = x.shape[a]
        s, e = s + n if s < 0 else s, e + n if e < 0 else e
        s, e = (min(max(s, 0), n), min(max(e, 0), n)) if k > 0 else \
            (min(max(s, 0), n - 1), min(max(e, -1), n - 1))
        shape[a] = len(range(s, e, k))
        if (s, e, k) != (0, n, 1):
            kept.append((a, s, e, k))
    if 0 in shape:  # nothing kept: only a Concat may read it (Empty)
        return [Empty(c.node.output[0], shape)]
    if not kept:
        return [c.call("assign", x)]
    axes_, s_, e_, k_ = ([t[i] for t in kept] for i in range(4))
    if all(k == 1 for k in k_):
        return [c.call("slice", x, axes=axes_, starts=s_, ends=e_)]
    # Paddle's strided_slice reads a negative end from the back: -n - 1 is before the first
    e_ = [e if e >= 0 else -x.shape[a] - 1 for a, e in zip(axes_, e_, strict=True)]
    return [c.call("strided_slice", x, axes=axes_, starts=s_, ends=e_, strides=k_)]


@onnx_op("Split")
def _split(c: Ctx) -> list[Value]:
    x = c.tensor(0)
    ax = _axis(c, int(c.attr("axis", 0)), x.ndim)
    n, parts = x.shape[ax], len(c.node.output)
    if c.opset >= 13 and c.has(1):
        sizes = c.ints(1, "split")
    elif c.opset < 13 and "split" in c.attrs:
        sizes = int_list(c.attr("split"))
    else:  # equal parts, the last smaller (opset 18's num_outputs)
        size = -(-n // parts)
        sizes = [min(size, n - i * size) for i in range(parts)]
    if len(sizes) != parts or sum(sizes) != n or min(sizes) < 1:
        raise c.fail(f"split {sizes} into {parts} outputs does not cut axis {ax} of length {n} "
                     "into non-empty parts")
    if parts == 1:
        return [c.call("assign", x)]
    return list(c.call_op("split", x, sections=sizes, axis=ax).outputs)


def _pads(c: Ctx, rank: int) -> list[int]:
    """Pad's ``[x1_begin, x2_begin, ..., x1_end, x2_end, ...]`` over every axis."""
    pads = c.ints(1, "pads") if c.opset >= 11 else int_list(c.attr("pads"))
    axes = list(range(rank))
    if c.opset >= 18 and c.has(3):
        axes = [_axis(c, a, rank, "axes entry") for a in c.ints(3, "axes")]
    if len(pads) != 2 * len(axes):
        raise c.fail(f"pads {pads} has not two entries per axis of {axes}")
    full = [0] * (2 * rank)
    for i, a in enumerate(axes):
        full[a], full[rank + a] = pads[i], pads[len(axes) + i]
    return full


def _run(c: Ctx, x: Tensor, d: int, start: int, stop: int, step: int, part: str) -> Tensor:
    """Positions ``range(start, stop, step)`` of ``x`` along ``d`` (a reversed run is a
    ``strided_slice``, whose end -n - 1 is before the first element)."""
    if step == 1:
        return c.call("slice", x, axes=[d], starts=[start], ends=[stop], part=part)
    return c.call("strided_slice", x, axes=[d], starts=[start],
                  ends=[stop if stop >= 0 else -x.shape[d] - 1], strides=[step], part=part)


def _border(c: Ctx, x: Tensor, pads: list[int], mode: str) -> Tensor:
    """Pad modes ``reflect``, ``edge`` and ``wrap`` as the runs of ``x`` they repeat, concatenated
    around it axis by axis (as numpy.pad and onnx.reference do: a later axis pads the corners
    from the earlier axes' result)."""
    r = x.ndim
    padded = [d for d in range(r) if pads[d] or pads[r + d]]
    for d in padded:
        before, after, n = pads[d], pads[r + d], x.shape[d]
        limit = n - 1 if mode == "reflect" else n if mode == "wrap" else None
        if limit is not None and max(before, after) > limit:
            raise c.fail(f"mode {mode!r} pads axis {d} of length {n} by {before} and {after}; "
                         f"it repeats at most {limit} elements")
        runs = {"reflect": ((before, 0, -1), (n - 2, n - 2 - after, -1)),
                "wrap": ((n - before, n, 1), (0, after, 1)),
                "edge": ((0, 1, 1), (n - 1, n, 1))}[mode]
        parts = []
        for side, count, (start, stop, step) in zip(("before", "after"), (before, after), runs,
                                                    strict=True):
            if not count:
                continue
            part = _run(c, x, d, start, stop, step, f"{side}{d}")
            if mode == "edge" and count > 1:
                shape = list(part.shape)
                shape[d] = count
                part = c.call("expand", part, shape=shape, part=f"{side}{d}.repeat")
            parts.append((side, part))
        pieces = [p for side, p in parts if side == "before"] + [x] + [
            p for side, p in parts if side == "after"]
        x = c.call("concat", pieces, axis=d, part="" if d == padded[-1] else f"axis{d}")
    return x


@onnx_op("Pad")
def _pad(c: Ctx) -> list[Value]:
    """mode ``constant`` as ``pad`` (Paddle's ``[x1_begin, x1_end, ...]``), negative pads crop
    (a slice after it); ``reflect``, ``edge`` and ``wrap`` as the runs of x they repeat."""
    x = c.tensor(0)
    mode = c.attr("mode", "constant")
    pads = _pads(c, x.ndim)
    if mode in ("reflect", "edge", "wrap"):
        if min(pads) < 0:
            raise c.fail(f"mode {mode!r} with negative pads {pads} is not mapped")
        return [_border(c, x, pads, mode) if any(pads) else c.call("assign", x)]
    if mode != "constant":
        raise c.fail(f"mode {mode!r} is not an ONNX value (constant, reflect, edge, wrap)")
    value = c.attr("value", 0.0) if c.opset < 11 else (
        np.asarray(c.static(2)).reshape(-1)[0].item() if c.has(2) else 0)
    r = x.ndim
    grow = [max(p, 0) for p in pads]
    y = x
    if any(grow):
        y = c.call("pad", x, paddings=[v for d in range(r) for v in (grow[d], grow[r + d])],
                   pad_value=float(value), part="pad" if any(p < 0 for p in pads) else "")
    crop = [d for d in range(r) if pads[d] < 0 or pads[r + d] < 0]
    if crop:
        y = c.call("slice", y, axes=crop, starts=[-min(pads[d], 0) for d in crop],
                   ends=[y.shape[d] + min(pads[r + d], 0) for d in crop])
    return [y if y is not x else c.call("assign", x)]


@onnx_op("Tile")
def _tile(c: Ctx) -> list[Value]:
    x = c.tensor(0)
    reps = c.ints(1, "repeats")
    if len(reps) != x.ndim or min(reps, default=1) < 1:
        raise c.fail(f"repeats {reps}: one positive count per axis of rank {x.ndim}")
    return [c.call("tile", x, repeat_times=reps) if any(r != 1 for r in reps) else
            c.call("assign", x)]


def broadcast(c: Ctx, a: Sequence[int], b: Sequence[int]) -> list[int]:
    try:
        return [int(d) for d in np.broadcast_shapes(tuple(a), tuple(b))]
    except ValueError as e:
        raise c.fail(f"shapes {list(a)} and {list(b)} do not broadcast") from e


@onnx_op("Expand")
def _expand(c: Ctx) -> list[Value]:
    """Expand broadcasts both ways: the result is the broadcast of the input's shape and the
    given one."""
    x = c.tensor(0)
    shape = broadcast(c, x.shape, c.ints(1, "shape"))
    return [c.call("expand", x, shape=shape) if shape != list(x.shape) else c.call("assign", x)]


@onnx_op("TopK")
def _topk(c: Ctx) -> list[Value]:
    """The k largest (or smallest) along ``axis``, ties to the lower index, sorted (ONNX lets
    ``sorted=0`` give any order)."""
    x = c.tensor(0)
    k = int(c.ints(1, "K")[0]) if c.opset >= 10 else int(c.attr("k"))
    ax = _axis(c, int(c.attr("axis", -1)), x.ndim)
    if not 1 <= k <= x.shape[ax]:
        raise c.fail(f"K {k} is outside 1..{x.shape[ax]}, the length of axis {ax}")
    return list(c.call_op("topk", x, k=k, axis=ax, largest=bool(c.attr("largest", 1)),
                          sorted=True).outputs)


__all__ = ["broadcast"]
