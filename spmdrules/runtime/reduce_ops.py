"""Reductions of pending partials: each reduce type's numpy combine, applied in rank order, in
one process (:func:`reduce_in_order`) or by MPI (:func:`allreduce`, :func:`reduce_scatter`).

Both give what serial numpy gives for the same pieces. A NaN in any piece propagates; and where
numpy's choice between -0.0 and 0.0 depends on the order of the operands (``np.maximum(-0.0,
0.0)`` is ``0.0`` but ``np.maximum(0.0, -0.0)`` is ``-0.0``: float32, float64 and bfloat16 keep
the later operand of a tie, float16 the earlier), the result is that of numpy's fold of the
pieces in rank order, which is also what numpy's max over the whole axis gives.

MPI's predefined MAX and MIN cannot do this: they compare in C (``a > b ? a : b``), which keeps
or drops a NaN depending on which operand holds it, and they are commutative, so MPI applies
them in any order: the ranks of one group ended with different copies of one replicated tensor.
The MPI ops here are numpy's ufuncs, user-defined (as fast as MPI's own on 8 KB and 8 MB of
float64 over 4 ranks). A max or a min is declared not commutative, which MPI applies in
ascending rank order (the MPI standard, "User-Defined Reduction Operations"); a group's ranks
are ordered by their mesh coordinate, the order of the pieces. Addition, multiplication and the
logical ops give the same bits in either order, so they are declared commutative and MPI may
group a sum otherwise than the fold does: a difference in rounding only.

Selections (max, min, any, all) combine in the pieces' own dtype: exact, and a float16 tie must
be decided by float16's rule. Sums, averages and products of float16 and bfloat16 accumulate in
float32 (:func:`~spmdrules.runtime._mpi.accumulation_dtype`), then round once; averages of
integers in float64, as ``np.mean``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from spmdrules.core.placements import REDUCE_TYPES
from spmdrules.runtime._mpi import accumulation_dtype, is_half, mpi, mpi_datatype
from spmdrules.runtime.errors import TensorStructureError

Array = NDArray[Any]

#: the binary combine of each reduce type (avg combines as a sum, then divides)
COMBINE: Final[Mapping[str, np.ufunc]] = {
    "sum": np.add, "avg": np.add, "max": np.maximum, "min": np.minimum,
    "product": np.multiply, "any": np.logical_or, "all": np.logical_and,
}
#: reduce types whose result is one of the pieces' values
SELECTIONS: Final = frozenset({"max", "min", "any", "all"})


def _check(reduce_type: str) -> np.ufunc:
    if reduce_type not in COMBINE:
        raise TensorStructureError(f"unknown reduce type {reduce_type!r}; use one of "
                                   f"{', '.join(REDUCE_TYPES)}")
    return COMBINE[reduce_type]


def reduction_dtype(reduce_type: str, dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype pieces of ``dtype`` are combined in: their own for a selection, float64 for an
    average of integers (as ``np.mean``: their sum may not fit), else the accumulation dtype
    (float32 for the half floats)."""
    dtype = np.dtype(dtype)
    if reduce_type in SELECTIONS:
        return dtype
    if reduce_type == "avg" and dtype.kind in "iu":
        return np.dtype(np.float64)
    return accumulation_dtype(dtype)


def _finish(out: Array, reduce_type: str, n: int, dtype: np.dtype[Any]) -> Array:
    """The combined value back in the pieces' dtype (an average divided by the count first)."""
    # np.asarray: dividing a 0-d array gives a numpy scalar
    return np.asarray(out / n if reduce_type == "avg" else out).astype(dtype, copy=False)


def reduce_in_order(pieces: Sequence[Array], reduce_type: str) -> Array:
    """numpy's combine of ``pieces`` (one shape and dtype), folded in their order."""
    ufunc = _check(reduce_type)
    dtype = np.asarray(pieces[0]).dtype
    stack = np.stack([np.asarray(p) for p in pieces]).astype(
        reduction_dtype(reduce_type, dtype), copy=False)
    with np.errstate(all="ignore"):  # a NaN or an overflow is the result, not a fault
        out = ufunc.reduce(stack, axis=0)
    return _finish(np.asarray(out), reduce_type, len(pieces), dtype)


# ---- MPI --------------------------------------------------------------------------------------
#: dtypes MPI's own datatypes cannot name (the half floats travel as 2-byte words), by the
#: handle of the datatype duplicated for each
_NAMED: dict[int, np.dtype[Any]] = {}


@cache
def _half_datatype(dtype: np.dtype[Any]) -> Any:
    datatype = mpi_datatype(dtype).Dup()
    datatype.Set_name(dtype.name)
    _NAMED[datatype.handle] = dtype
    return datatype


def reduction_datatype(dtype: np.dtype[Any]) -> Any:
    """The MPI datatype a reduction of ``dtype`` sends: its own, or for a half float a copy of
    the 2-byte word's by which the combine knows the dtype."""
    dtype = np.dtype(dtype)
    return _half_datatype(dtype) if is_half(dtype) else mpi_datatype(dtype)


def _numpy_dtype(datatype: Any) -> np.dtype[Any]:
    named = _NAMED.get(datatype.handle)
    if named is not None:
        return named
    from mpi4py.util.dtlib import to_numpy_dtype

    return np.dtype(to_numpy_dtype(datatype))


@cache
def ufunc_op(ufunc: np.ufunc) -> Any:
    """``ufunc`` as a user-defined MPI op (mpi4py holds at most 32 at once: one per ufunc).
    A max or a min is declared not commutative: MPI passes the lower ranks' operand first
    (``inout = in op inout``), so the fold keeps numpy's order. The others give the same bits
    in either order (a NaN's payload aside), so MPI may reorder them."""

    def combine(inbuf: Any, inoutbuf: Any, datatype: Any) -> None:
        dtype = _numpy_dtype(datatype)
        inout = np.frombuffer(inoutbuf, dtype)
        with np.errstate(all="ignore"):
            ufunc(np.frombuffer(inbuf, dtype), inout, out=inout)

    return mpi().Op.Create(combine, commute=ufunc not in (np.maximum, np.minimum))


def allreduce(comm: Any, x: Array, reduce_type: str) -> Array:
    """Every rank of ``comm`` gets :func:`reduce_in_order` of the ranks' ``x`` (one shape and
    dtype on every rank)."""
    op = ufunc_op(_check(reduce_type))
    acc = reduction_dtype(reduce_type, x.dtype)
    xa = np.array(x, dtype=acc, order="C")  # np.ascontiguousarray turns a 0-d x into shape (1,)
    out = np.empty_like(xa)
    t = reduction_datatype(acc)
    comm.Allreduce([xa, t], [out, t], op)
    return _finish(out, reduce_type, comm.Get_size(), x.dtype)


def reduce_scatter(comm: Any, x: Array, counts: Sequence[int], reduce_type: str) -> Array:
    """Rank ``i`` of ``comm`` gets :func:`reduce_in_order` of the ranks' ``x`` (flattened in C
    order) at entries ``sum(counts[:i])`` to ``sum(counts[:i + 1])``, flat."""
    op = ufunc_op(_check(reduce_type))
    acc = reduction_dtype(reduce_type, x.dtype)
    xa = np.array(x, dtype=acc, order="C")
    out = np.empty(counts[comm.Get_rank()], dtype=acc)
    t = reduction_datatype(acc)
    comm.Reduce_scatter([xa, t], [out, t], list(counts), op)
    return _finish(out, reduce_type, comm.Get_size(), x.dtype)


__all__ = [
    "COMBINE",
    "SELECTIONS",
    "allreduce",
    "reduce_in_order",
    "reduce_scatter",
    "reduction_datatype",
    "reduction_dtype",
    "ufunc_op",
]
