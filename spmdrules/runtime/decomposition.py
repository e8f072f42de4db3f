"""Balanced decomposition of tensor axes over workers, boxes and zero-volume arrays.

Pure logic, no MPI.  Along an axis of length ``n`` split over ``P`` workers, worker ``i``
holds ``n // P + (1 if i < n % P else 0)`` entries, starting at ``(n // P) * i + min(i, n % P)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from typing import Any

import numpy as np
import numpy.typing as npt

from spmdrules.runtime.errors import RuntimeSetupError

# A half-open box in global index space: one (start, stop) pair per tensor axis.
Box = tuple[tuple[int, int], ...]


def balanced_size(n: int, parts: int, i: int) -> int:
    """Number of entries worker ``i`` of ``parts`` holds along an axis of length ``n``."""
    _check_split(n, parts, i)
    return n // parts + (1 if i < n % parts else 0)


def balanced_start(n: int, parts: int, i: int) -> int:
    """First global index held by worker ``i`` of ``parts`` along an axis of length ``n``."""
    _check_split(n, parts, i)
    return (n // parts) * i + min(i, n % parts)


def balanced_sizes(n: int, parts: int) -> tuple[int, ...]:
    """Sizes of every worker's block along an axis of length ``n`` split over ``parts``."""
    return tuple(balanced_size(n, parts, i) for i in range(parts))


def starts_from_sizes(sizes: Sequence[int]) -> tuple[int, ...]:
    """Start offsets of consecutive blocks of the given sizes."""
    return (0, *accumulate(sizes))[: len(sizes)]


def balanced_box(global_shape: Sequence[int], grid: Sequence[int], index: Sequence[int]) -> Box:
    """Global box held by the worker at Cartesian ``index`` of a ``grid`` (balanced)."""
    if not len(global_shape) == len(grid) == len(index):
        raise RuntimeSetupError(
            f"tensor of dimension {len(global_shape)} cannot be decomposed over a partition of "
            f"dimension {len(grid)}; give the partition one axis per tensor axis (use 1 for "
            "axes that are not split)"
        )
    return tuple(
        (balanced_start(n, p, i), balanced_start(n, p, i) + balanced_size(n, p, i))
        for n, p, i in zip(global_shape, grid, index, strict=True)
    )


def box_shape(box: Box) -> tuple[int, ...]:
    """Shape of the array a box describes (empty axes give 0)."""
    return tuple(max(0, b - a) for a, b in box)


def box_volume(box: Box) -> int:
    """Number of entries in a box."""
    return int(np.prod(box_shape(box), dtype=np.int64))


def intersect(a: Box, b: Box) -> Box | None:
    """Intersection of two boxes, or None when it is empty."""
    out = tuple((max(x0, y0), min(x1, y1)) for (x0, x1), (y0, y1) in zip(a, b, strict=True))
    return None if any(lo >= hi for lo, hi in out) else out


def relative(inner: Box, outer: Box) -> tuple[slice, ...]:
    """Slices that select ``inner`` from an array holding ``outer``."""
    return tuple(slice(i0 - o0, i1 - o0) for (i0, i1), (o0, _) in zip(inner, outer, strict=True))


# Plan-owned buffers start at a chosen offset in a memory page (a page boundary by default),
# so copies and MPI transfers behave the same whatever state the allocator is in (a heap
# chunk's offset can make them much slower); buffers that receive from another array are
# placed at that array's offset in its page.
BUFFER_ALIGNMENT = 4096


def aligned_empty(
    shape: Sequence[int] | int, dtype: npt.DTypeLike, page_offset: int = 0
) -> npt.NDArray[Any]:
    """An uninitialised C-ordered array whose data starts ``page_offset`` bytes (rounded down
    to the dtype's alignment) into a memory page."""
    dims = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
    dt = np.dtype(dtype)
    offset = int(page_offset) % BUFFER_ALIGNMENT
    offset -= offset % dt.alignment
    nbytes = int(np.prod(dims, dtype=np.int64)) * dt.itemsize
    raw = np.empty(nbytes + 2 * BUFFER_ALIGNMENT, dtype=np.uint8)
    start = (-raw.ctypes.data) % BUFFER_ALIGNMENT + offset
    return raw[start : start + nbytes].view(dt).reshape(dims)


def zero_volume_tensor(
    b: int | None = None, dtype: npt.DTypeLike = np.float64
) -> npt.NDArray[Any]:
    """An empty array: shape ``(0,)``, or ``(b, 0)`` when a batch size ``b`` is kept."""
    shape: tuple[int, ...] = (0,) if b is None else (int(b), 0)
    return np.zeros(shape, dtype=dtype)


class ZeroVolumeCache:
    """The zero-volume array an inactive worker returns, made once per (batch, dtype): the
    steady path allocates nothing."""

    __slots__ = ("_zeros", "preserve_batch")

    def __init__(self, preserve_batch: bool) -> None:
        self.preserve_batch = preserve_batch
        self._zeros: dict[tuple[int | None, str], npt.NDArray[Any]] = {}

    def like(self, a: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """Zero volume, keeping ``a``'s batch size when ``preserve_batch`` is set."""
        batch = a.shape[0] if self.preserve_batch and a.ndim > 0 else None
        key = (batch, a.dtype.str)
        zero = self._zeros.get(key)
        if zero is None:
            zero = self._zeros[key] = zero_volume_tensor(batch, dtype=a.dtype)
        return zero


def _check_split(n: int, parts: int, i: int) -> None:
    if parts < 1 or n < 0 or not 0 <= i < parts:
        raise RuntimeSetupError(
            f"cannot split an axis of length {n} over {parts} workers at position {i}; "
            "the worker count must be >= 1, the length >= 0 and the position in [0, parts)"
        )
