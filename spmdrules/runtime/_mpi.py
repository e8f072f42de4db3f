"""Lazy access to mpi4py, so that importing :mod:`spmdrules.runtime` never needs MPI."""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from spmdrules.core.dtypes import is_bfloat16
from spmdrules.runtime.errors import MPIUnavailableError, TensorStructureError


@cache
def mpi() -> Any:
    """Return the ``mpi4py.MPI`` module, importing it on first use."""
    try:
        from mpi4py import MPI
    except ImportError as exc:  # pragma: no cover - exercised only without mpi4py
        raise MPIUnavailableError(
            "the partition runtime needs mpi4py and an MPI library; "
            "install them in a clone of spmdrules with `pip install -e '.[mpi]'`"
        ) from exc
    return MPI


# Every dtype a runtime tensor may have, in a fixed order: a dtype travels between
# workers as its position in this tuple.  bfloat16 has no numpy type of its own; an array of
# it comes from an extension dtype named "bfloat16" (ml_dtypes', as JAX and others use), which
# takes the last code when it is importable.
SUPPORTED_DTYPES: tuple[np.dtype[Any], ...] = tuple(
    np.dtype(c)
    for c in (
        "float64", "float32", "int64", "int32", "int16", "int8",
        "uint64", "uint32", "uint16", "uint8", "complex128", "complex64", "float16",
    )
)
BFLOAT16_CODE = len(SUPPORTED_DTYPES)
#: names of the dtypes of :data:`SUPPORTED_DTYPES`, bfloat16 included (for messages)
SUPPORTED_NAMES = ", ".join([*(d.name for d in SUPPORTED_DTYPES), "bfloat16"])


_DTYPE_CODES = {d: i for i, d in enumerate(SUPPORTED_DTYPES)}


@cache
def bfloat16_dtype() -> np.dtype[Any]:
    """The bfloat16 dtype (needs the ml_dtypes package, which any bfloat16 array comes from)."""
    try:
        import ml_dtypes
    except ImportError:  # pragma: no cover - a peer sent bfloat16, so it has ml_dtypes
        raise TensorStructureError(
            "a worker moves a bfloat16 tensor, but ml_dtypes is not importable on this one; "
            "install ml_dtypes on every worker"
        ) from None
    dtype: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
    return dtype


def is_supported(dtype: np.dtype[Any]) -> bool:
    """True if the runtime moves arrays of ``dtype``."""
    return dtype in _DTYPE_CODES or is_bfloat16(dtype)


def dtype_code(dtype: np.dtype[Any], what: str) -> int:
    """Position of ``dtype`` in :data:`SUPPORTED_DTYPES` (bfloat16: :data:`BFLOAT16_CODE`);
    raise a typed error if absent."""
    code = _DTYPE_CODES.get(dtype)
    if code is not None:
        return code
    if is_bfloat16(dtype):
        return BFLOAT16_CODE
    raise TensorStructureError(
        f"{what}: dtype {np.dtype(dtype).name} is not supported; convert the array to one "
        f"of {SUPPORTED_NAMES}"
    )


def dtype_of_code(code: int) -> np.dtype[Any]:
    """Inverse of :func:`dtype_code`."""
    return bfloat16_dtype() if code == BFLOAT16_CODE else SUPPORTED_DTYPES[code]


def is_half(dtype: np.dtype[Any]) -> bool:
    """float16 or bfloat16: moved as 2-byte words, reduced in float32."""
    return dtype == np.float16 or is_bfloat16(dtype)


def accumulation_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype a reduction of ``dtype`` accumulates in: float32 for the half-precision
    floats (their 10 or 7 mantissa bits lose whole addends after a few sums), else itself."""
    return np.dtype(np.float32) if is_half(dtype) else np.dtype(dtype)


def mpi_datatype(dtype: np.dtype[Any]) -> Any:
    """The MPI datatype that moves a numpy dtype (half-precision floats as 2-byte words: MPI
    only moves them; reductions convert to :func:`accumulation_dtype` first)."""
    dtype = np.dtype(dtype)
    if is_half(dtype):
        return mpi().Datatype.fromcode("H")
    return mpi().Datatype.fromcode(dtype.char)


# Tensor structure travels as a fixed-length int64 header: dtype code, ndim, then the shape
# padded with zeros (STRUCTURE_LEN entries), and last the offset of the array's data in its
# memory page.  The offset is a hint, not structure: plans allocate receive buffers at the
# sender's offset, because copies between buffers at different offsets in their pages (the
# kernel's cross-process copy included) run up to a third slower.  MAX_NDIM bounds the
# tensor dimension the runtime moves.
MAX_NDIM = 12
STRUCTURE_LEN = 2 + MAX_NDIM
HEADER_LEN = STRUCTURE_LEN + 1
PAGE_OFFSET_SLOT = STRUCTURE_LEN
PAGE = 4096


def write_header(
    header: np.ndarray[Any, np.dtype[np.int64]], array: np.ndarray[Any, Any], what: str
) -> None:
    """Write the structure header of ``array`` into ``header`` (no allocation)."""
    if array.ndim > MAX_NDIM:
        raise TensorStructureError(
            f"{what}: arrays of dimension {array.ndim} are not supported (at most {MAX_NDIM}); "
            "reshape the tensor to fewer dimensions"
        )
    header[0] = dtype_code(array.dtype, what)
    header[1] = array.ndim
    header[2 : 2 + array.ndim] = array.shape
    header[2 + array.ndim : STRUCTURE_LEN] = 0
    header[PAGE_OFFSET_SLOT] = array.ctypes.data % PAGE if array.size else 0


def decode_header(header: np.ndarray[Any, Any]) -> tuple[np.dtype[Any], tuple[int, ...]]:
    """The dtype and shape a header written by :func:`write_header` describes."""
    ndim = int(header[1])
    return dtype_of_code(int(header[0])), tuple(int(s) for s in header[2 : 2 + ndim])
