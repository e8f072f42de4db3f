"""Element types as the executors meet them: numpy's own, and bfloat16.

bfloat16 has no numpy type; an array of it comes from ml_dtypes' extension dtype (as JAX and
others use), whose kind letter is ``'V'``. numpy's kind letters, ``np.finfo`` and ``np.iinfo``
do not know it as a float, so code that classifies a dtype asks here instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from spmdrules.core.errors import SpmdError


def is_bfloat16(dtype: np.dtype[Any]) -> bool:
    """True for a 2-byte extension dtype named bfloat16 (ml_dtypes.bfloat16)."""
    return dtype.name == "bfloat16" and dtype.itemsize == 2


def is_float(dtype: np.dtype[Any]) -> bool:
    """A real floating-point dtype: numpy's floats and bfloat16."""
    return dtype.kind == "f" or is_bfloat16(dtype)


def is_inexact(dtype: np.dtype[Any]) -> bool:
    """A dtype that holds NaN: the real floats (bfloat16 too) and the complex ones."""
    return dtype.kind == "c" or is_float(dtype)


def extremes(dtype: np.dtype[Any]) -> tuple[Any, Any]:
    """(lowest, highest) value of ``dtype``: the identities of a max and of a min. Floats
    (bfloat16 too) have the infinities, integers their bounds, bool False and True."""
    if is_float(dtype):
        return -np.inf, np.inf
    if dtype.kind == "b":
        return False, True
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min, info.max
    raise SpmdError(f"dtype {dtype.name} has no order, so it has no maximum or minimum; use a "
                    "real float, integer or bool dtype")


def same_values(a: NDArray[Any], b: NDArray[Any]) -> bool:
    """Whether ``b`` (as ``a``'s dtype) holds the values of ``a`` bit for bit, a NaN matching
    any NaN whatever its payload: the test two copies of a replicated tensor must pass. -0.0
    and 0.0 differ here (numpy's ``==`` calls them equal): a correct run gives every copy the
    same bits."""
    if a.shape != b.shape:
        return False
    b = b.astype(a.dtype, copy=False)
    if not is_inexact(a.dtype):
        return bool(np.array_equal(a, b))
    if a.dtype.kind == "c":
        same = _same_bits(a.real, b.real) & _same_bits(a.imag, b.imag)
    else:
        same = _same_bits(a, b)
    return bool(np.all(same | (np.isnan(a) & np.isnan(b))))


def _same_bits(a: NDArray[Any], b: NDArray[Any]) -> NDArray[np.bool_]:
    width = np.dtype(f"u{a.dtype.itemsize}")  # a view of the same width works at any strides
    out: NDArray[np.bool_] = a.view(width) == b.view(width)
    return out


__all__ = ["extremes", "is_bfloat16", "is_float", "is_inexact", "same_values"]
