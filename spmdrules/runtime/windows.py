"""Sliding-window geometry and the local (serial) window kernels, in any dimension.

Pure numpy, no MPI.  A window along one axis has a kernel size, stride, padding (both
sides), dilation and ceil_mode, with PyTorch's semantics.  The same local functions compute
the serial result (on the whole tensor) and each worker's part of the distributed result (on
its halo-extended slab), which is what makes the distributed layers match the serial ones
exactly.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spmdrules.core.dtypes import extremes, is_float
from spmdrules.runtime.errors import RuntimeSetupError, TensorStructureError

Array = np.ndarray[Any, Any]
# A half-open index range along one axis.
Span = tuple[int, int]


@dataclass(frozen=True)
class Window:
    """One axis of a sliding window (origin at the window's first entry)."""

    kernel: int
    stride: int = 1
    padding: int = 0
    dilation: int = 1
    ceil_mode: bool = False

    def __post_init__(self) -> None:
        if self.kernel < 1 or self.stride < 1 or self.dilation < 1 or self.padding < 0:
            raise RuntimeSetupError(
                f"invalid window {self}: kernel, stride and dilation must be >= 1 and padding "
                ">= 0"
            )

    @property
    def extent(self) -> int:
        """Number of input positions one window spans, holes included."""
        return self.dilation * (self.kernel - 1) + 1

    def output_length(self, n: int) -> int:
        """Number of windows over an axis of length ``n`` (PyTorch's formula)."""
        span = n + 2 * self.padding - self.extent
        if span < 0:
            raise TensorStructureError(
                f"an axis of length {n} with padding {self.padding} is shorter than the window "
                f"extent {self.extent} (kernel {self.kernel}, dilation {self.dilation}); use a "
                "longer input, more padding or a smaller window"
            )
        if self.ceil_mode:
            m = -(-span // self.stride) + 1
            if (m - 1) * self.stride >= n + self.padding:
                m -= 1
            return m
        return span // self.stride + 1

    def window_span(self, outputs: Span) -> Span:
        """Unclipped input positions (padding included) read by outputs ``[j0, j1)``."""
        j0, j1 = outputs
        if j1 <= j0:
            return (0, 0)
        lo = j0 * self.stride - self.padding
        return lo, (j1 - 1) * self.stride - self.padding + self.extent

    def input_span(self, outputs: Span, n: int) -> Span:
        """Input positions in ``[0, n)`` read by outputs ``[j0, j1)`` (empty as (0, 0))."""
        lo, hi = self.window_span(outputs)
        lo, hi = max(lo, 0), min(hi, n)
        return (lo, hi) if hi > lo else (0, 0)

    def readers(self, inputs: Span, m: int) -> Span:
        """Windows in ``[0, m)`` whose span (padding included) meets input positions ``[a, b)``,
        empty as (0, 0): what a transposed window op's output block ``[a, b)`` is summed from."""
        a, b = inputs
        if b <= a:
            return (0, 0)
        lo = max((a + self.padding - self.extent) // self.stride + 1, 0)
        hi = min(-(-(b + self.padding) // self.stride), m)
        return (lo, hi) if hi > lo else (0, 0)

    def divisor_counts(self, outputs: Span, n: int, include_pad: bool) -> Array:
        """For average pooling: how many window entries count, per output in ``outputs``."""
        j = np.arange(*outputs)
        start = j * self.stride - self.padding
        pos = start[:, None] + self.dilation * np.arange(self.kernel)[None, :]
        lo, hi = (-self.padding, n + self.padding) if include_pad else (0, n)
        counts: Array = np.count_nonzero((pos >= lo) & (pos < hi), axis=1)
        # A dilated window may hold no counted entry at all; it averages to 0, not NaN.
        return np.maximum(counts, 1)


def as_windows(
    kernel: int | Sequence[int],
    stride: int | Sequence[int] | None,
    padding: int | Sequence[int],
    dilation: int | Sequence[int],
    ceil_mode: bool,
    ndim: int,
) -> tuple[Window, ...]:
    """One Window per spatial axis from PyTorch-style scalar-or-tuple arguments."""

    def spread(value: int | Sequence[int], name: str) -> tuple[int, ...]:
        vals = (int(value),) * ndim if isinstance(value, int) else tuple(int(v) for v in value)
        if len(vals) != ndim:
            raise RuntimeSetupError(
                f"{name}={value!r} has {len(vals)} entries for {ndim} spatial dimensions; give "
                f"an int or {ndim} ints"
            )
        return vals

    k = spread(kernel, "kernel_size")
    s = k if stride is None else spread(stride, "stride")
    p, d = spread(padding, "padding"), spread(dilation, "dilation")
    return tuple(
        Window(ki, si, pi, di, ceil_mode) for ki, si, pi, di in zip(k, s, p, d, strict=True)
    )


def _padded(slab: Array, slab_spans: Sequence[Span], spans: Sequence[Span], fill: Any) -> Array:
    """The slab (trailing axes covering ``slab_spans``) embedded in ``spans``, with ``fill``."""
    lead = slab.shape[: slab.ndim - len(spans)]
    shape = lead + tuple(hi - lo for lo, hi in spans)
    buf = np.full(shape, fill, dtype=slab.dtype)
    dst = [slice(None)] * len(lead)
    src = [slice(None)] * len(lead)
    for (a, b), (lo, hi) in zip(slab_spans, spans, strict=True):
        a2, b2 = max(a, lo), min(b, hi)
        if b2 <= a2:
            return buf
        dst.append(slice(a2 - lo, b2 - lo))
        src.append(slice(a2 - a, b2 - a))
    buf[tuple(dst)] = slab[tuple(src)]
    return buf


def _offset_slices(
    windows: Sequence[Window], offsets: Sequence[int], counts: Sequence[int], lead: int
) -> tuple[slice, ...]:
    sl = [slice(None)] * lead
    for w, t, m in zip(windows, offsets, counts, strict=True):
        start = t * w.dilation
        sl.append(slice(start, start + (m - 1) * w.stride + 1, w.stride))
    return tuple(sl)


def _lowest(dtype: np.dtype[Any]) -> Any:
    if is_float(dtype) or dtype.kind in "iu":
        return extremes(dtype)[0]
    raise TensorStructureError(f"max pooling does not support dtype {dtype.name}")


@dataclass
class LocalWindows:
    """Where a slab sits and which outputs to compute from it."""

    windows: tuple[Window, ...]
    in_spans: tuple[Span, ...]  # global input range the slab covers (spatial axes)
    out_spans: tuple[Span, ...]  # global output range to compute
    in_lengths: tuple[int, ...]  # global input length per spatial axis

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple(max(0, b - a) for a, b in self.out_spans)

    def buffer_spans(self) -> tuple[Span, ...]:
        return tuple(w.window_span(o) for w, o in zip(self.windows, self.out_spans, strict=True))

    def offsets(self) -> Any:
        return itertools.product(*(range(w.kernel) for w in self.windows))


def max_pool(slab: Array, geo: LocalWindows) -> tuple[Array, Array]:
    """Max over each window; also the flat kernel offset of the first maximum (for adjoint)."""
    lead = slab.ndim - len(geo.windows)
    out_shape = slab.shape[:lead] + geo.counts
    if 0 in geo.counts:
        return np.empty(out_shape, slab.dtype), np.zeros(out_shape, np.intp)
    buf = _padded(slab, geo.in_spans, geo.buffer_spans(), _lowest(slab.dtype))
    best = np.full(out_shape, _lowest(slab.dtype), dtype=slab.dtype)
    arg = np.zeros(out_shape, dtype=np.intp)
    for flat, offs in enumerate(geo.offsets()):
        cand = buf[_offset_slices(geo.windows, offs, geo.counts, lead)]
        better = cand > best if flat else np.ones(out_shape, dtype=bool)
        np.copyto(best, cand, where=better)
        arg[better] = flat
    return best, arg


def max_pool_adjoint(dy: Array, arg: Array, geo: LocalWindows, slab_shape: Sequence[int]) -> Array:
    """Transpose of max pooling at the recorded maxima: route each dy to its window's max."""
    lead = dy.ndim - len(geo.windows)
    if 0 in geo.counts:
        return np.zeros(tuple(slab_shape), dtype=dy.dtype)
    spans = geo.buffer_spans()
    buf = np.zeros(dy.shape[:lead] + tuple(b - a for a, b in spans), dtype=dy.dtype)
    for flat, offs in enumerate(geo.offsets()):
        sl = _offset_slices(geo.windows, offs, geo.counts, lead)
        buf[sl] += np.where(arg == flat, dy, 0)
    return _crop(buf, spans, geo.in_spans, slab_shape)


def max_pool_select(slab: Array, arg: Array, geo: LocalWindows) -> Array:
    """The linearisation of max pooling at recorded maxima ``arg``, applied to ``slab``."""
    lead = slab.ndim - len(geo.windows)
    out = np.zeros(arg.shape, dtype=slab.dtype)
    if 0 in geo.counts:
        return out
    buf = _padded(slab, geo.in_spans, geo.buffer_spans(), 0)
    for flat, offs in enumerate(geo.offsets()):
        np.copyto(out, buf[_offset_slices(geo.windows, offs, geo.counts, lead)], where=arg == flat)
    return out


def avg_pool(slab: Array, geo: LocalWindows, include_pad: bool) -> Array:
    """Mean over each window with PyTorch's divisor (count_include_pad)."""
    lead = slab.ndim - len(geo.windows)
    out_shape = slab.shape[:lead] + geo.counts
    acc_dtype = np.result_type(slab.dtype, np.float64) if slab.dtype.kind in "iub" else slab.dtype
    if 0 in geo.counts:
        return np.empty(out_shape, acc_dtype)
    buf = _padded(slab, geo.in_spans, geo.buffer_spans(), 0)
    acc = np.zeros(out_shape, dtype=acc_dtype)
    for offs in geo.offsets():
        acc += buf[_offset_slices(geo.windows, offs, geo.counts, lead)]
    out: Array = acc / _divisor(geo, include_pad).astype(acc_dtype)
    return out


def avg_pool_adjoint(
    dy: Array, geo: LocalWindows, include_pad: bool, slab_shape: Sequence[int]
) -> Array:
    """Transpose of :func:`avg_pool`."""
    lead = dy.ndim - len(geo.windows)
    if 0 in geo.counts:
        return np.zeros(tuple(slab_shape), dtype=dy.dtype)
    scaled = dy / _divisor(geo, include_pad).astype(dy.dtype)
    spans = geo.buffer_spans()
    buf = np.zeros(dy.shape[:lead] + tuple(b - a for a, b in spans), dtype=dy.dtype)
    for offs in geo.offsets():
        buf[_offset_slices(geo.windows, offs, geo.counts, lead)] += scaled
    return _crop(buf, spans, geo.in_spans, slab_shape)


def _divisor(geo: LocalWindows, include_pad: bool) -> Array:
    div: Array = np.ones((), dtype=np.int64)
    for w, o, n in zip(geo.windows, geo.out_spans, geo.in_lengths, strict=True):
        div = np.multiply.outer(div, w.divisor_counts(o, n, include_pad))
    return div


def conv(slab: Array, weight: Array, bias: Array | None, geo: LocalWindows) -> Array:
    """Cross-correlation (PyTorch convolution) of ``slab`` (N, C_in, *S) with ``weight``."""
    n, c_out = slab.shape[0], weight.shape[0]
    dtype = np.result_type(slab.dtype, weight.dtype)
    out = np.zeros((n, c_out, *geo.counts), dtype=dtype)
    if 0 in geo.counts:
        return out
    buf = _padded(slab, geo.in_spans, geo.buffer_spans(), 0)
    for offs in geo.offsets():
        patch = buf[_offset_slices(geo.windows, offs, geo.counts, 2)]
        out += np.einsum("nc...,oc->no...", patch, weight[(slice(None), slice(None), *offs)],
                         optimize=True)  # BLAS: 3x faster than the plain loop
    if bias is not None:
        out += bias.reshape((1, c_out) + (1,) * len(geo.windows))
    return out


def conv_adjoint(
    dy: Array, slab: Array, weight: Array, geo: LocalWindows
) -> tuple[Array, Array, Array]:
    """Gradients of :func:`conv`: (d slab, d weight, d bias)."""
    dweight = np.zeros_like(weight, dtype=np.result_type(dy.dtype, weight.dtype))
    dbias = dy.sum(axis=tuple(i for i in range(dy.ndim) if i != 1))
    if 0 in geo.counts:
        return np.zeros(slab.shape, dtype=dy.dtype), dweight, dbias
    spans = geo.buffer_spans()
    buf = _padded(slab, geo.in_spans, spans, 0)
    dbuf = np.zeros(buf.shape, dtype=np.result_type(dy.dtype, weight.dtype))
    for offs in geo.offsets():
        sl = _offset_slices(geo.windows, offs, geo.counts, 2)
        w = weight[(slice(None), slice(None), *offs)]
        dbuf[sl] += np.einsum("no...,oc->nc...", dy, w, optimize=True)
        summed = [0, *range(2, dy.ndim)]
        dweight[(slice(None), slice(None), *offs)] = np.tensordot(dy, buf[sl], (summed, summed))
    return _crop(dbuf, spans, geo.in_spans, slab.shape), dweight, dbias


def _crop(
    buf: Array, spans: Sequence[Span], slab_spans: Sequence[Span], slab_shape: Sequence[int]
) -> Array:
    """The part of a window buffer that lies on the slab (zeros where they do not meet)."""
    out = np.zeros(tuple(slab_shape), dtype=buf.dtype)
    lead = len(slab_shape) - len(spans)
    dst = [slice(None)] * lead
    src = [slice(None)] * lead
    for (lo, hi), (a, b) in zip(spans, slab_spans, strict=True):
        a2, b2 = max(a, lo), min(b, hi)
        if b2 <= a2:
            return out
        dst.append(slice(a2 - a, b2 - a))
        src.append(slice(a2 - lo, b2 - lo))
    out[tuple(dst)] = buf[tuple(src)]
    return out


def full_geometry(spatial_shape: Sequence[int], windows: Sequence[Window]) -> LocalWindows:
    """The geometry of the serial computation: the whole input, every output."""
    lengths = tuple(int(n) for n in spatial_shape)
    return LocalWindows(
        windows=tuple(windows),
        in_spans=tuple((0, n) for n in lengths),
        out_spans=tuple((0, w.output_length(n)) for w, n in zip(windows, lengths, strict=True)),
        in_lengths=lengths,
    )
