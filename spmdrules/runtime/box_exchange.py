"""Multi-dimensional scatterv/gatherv of boxes of a tensor, on MPI subarray datatypes.

Every participant owns one box of a global tensor and needs one box of it.  ``gather`` moves,
in one ``MPI_Alltoallw``, the intersection of each owner's box with each needer's box
straight from the owner's array into the needer's array.  ``scatter_add`` is its exact
adjoint: every needer sends its pieces back and owners add what they receive (pieces may
overlap when needs overlap, as halos do).  Intersections and datatypes are built once per
structure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.runtime._mpi import mpi, mpi_datatype
from spmdrules.runtime.decomposition import Box, box_shape, box_volume, intersect, relative

Array = np.ndarray[Any, Any]


class BoxExchange:
    """The pieces one worker sends and receives between owned and needed boxes."""

    def __init__(
        self,
        comm: Any,
        my_slot: int,
        dtype: np.dtype[Any],
        owned: Sequence[Box | None],
        needed: Sequence[Box | None],
    ) -> None:
        self.comm = comm
        self.dtype = dtype
        self._base = mpi_datatype(dtype)
        n = len(owned)
        self.my_owned = owned[my_slot]
        self.my_needed = needed[my_slot]
        self._types: list[Any] = []
        # gather: send piece (my owned ∩ peer needed), receive piece (peer owned ∩ my needed)
        self.send_pieces: list[Box | None] = [
            _meet(self.my_owned, needed[p]) for p in range(n)
        ]
        self.recv_pieces: list[Box | None] = [
            _meet(owned[p], self.my_needed) for p in range(n)
        ]
        self._g_send = self._subarray_spec(self.send_pieces, self.my_owned)
        self._g_recv = self._subarray_spec(self.recv_pieces, self.my_needed)
        # scatter_add: send back the received pieces; receive into a packed staging buffer
        self._disjoint = _disjoint(needed)
        if self._disjoint:
            self._s_recv = self._subarray_spec(self.send_pieces, self.my_owned)
            self._staging = np.empty(0, dtype=dtype)
        else:
            volumes = [0 if b is None else box_volume(b) for b in self.send_pieces]
            offsets = np.concatenate([[0], np.cumsum(volumes)[:-1]]).astype(int)
            self._staging = np.empty(int(sum(volumes)), dtype=dtype)
            self._s_recv = (
                volumes,
                [int(o) * dtype.itemsize for o in offsets],
                [self._base] * n,
            )
            self._staging_offsets = [int(o) for o in offsets]
        self.needed_shape = box_shape(self.my_needed) if self.my_needed else None
        self.owned_shape = box_shape(self.my_owned) if self.my_owned else None
        self.bytes_gather = sum(
            box_volume(b) for p, b in enumerate(self.send_pieces) if b and p != my_slot
        ) * dtype.itemsize
        self.bytes_scatter = sum(
            box_volume(b) for p, b in enumerate(self.recv_pieces) if b and p != my_slot
        ) * dtype.itemsize
        covered = sum(box_volume(b) for b in self.send_pieces if b is not None)
        self._covers_owned = self.my_owned is not None and covered == box_volume(self.my_owned)

    def _subarray_spec(
        self, pieces: list[Box | None], outer: Box | None
    ) -> tuple[list[int], list[int], list[Any]]:
        MPI = mpi()
        counts, displs, types = [], [], []
        for piece in pieces:
            if piece is None or outer is None:
                counts.append(0)
                displs.append(0)
                types.append(self._base)
                continue
            sl = relative(piece, outer)
            offset = _contiguous_offset(piece, outer)
            if offset is not None:  # one run of memory: a plain count, no derived type
                counts.append(box_volume(piece))
                displs.append(offset * self.dtype.itemsize)
                types.append(self._base)
                continue
            t = self._base.Create_subarray(
                list(box_shape(outer)),
                list(box_shape(piece)),
                [s.start for s in sl],
                order=MPI.ORDER_C,
            ).Commit()
            self._types.append(t)
            counts.append(1)
            displs.append(0)
            types.append(t)
        return counts, displs, types

    def gather(self, x: Array, out: Array) -> Array:
        """Fill ``out`` (this worker's needed box) from the owners' arrays."""
        send = np.ascontiguousarray(x) if self.my_owned is not None else _EMPTY[self.dtype.str]
        recv = out if self.my_needed is not None else _EMPTY[self.dtype.str]
        self.comm.Alltoallw([send, *self._g_send], [recv, *self._g_recv])
        return out

    def scatter_add(self, grad: Array, out: Array) -> Array:
        """Adjoint of :meth:`gather`: return each needed piece to its owner and sum there."""
        send = np.ascontiguousarray(grad) if self.my_needed is not None else _EMPTY[self.dtype.str]
        if self._disjoint:
            recv = out if self.my_owned is not None else _EMPTY[self.dtype.str]
            if self.my_owned is not None and not self._covers_owned:
                out.fill(0)
            self.comm.Alltoallw([send, *self._g_recv], [recv, *self._s_recv])
            return out
        self.comm.Alltoallw([send, *self._g_recv], [self._staging, *self._s_recv])
        if self.my_owned is not None:
            out.fill(0)
            for piece, offset in zip(self.send_pieces, self._staging_offsets, strict=True):
                if piece is None:
                    continue
                shape = box_shape(piece)
                chunk = self._staging[offset : offset + box_volume(piece)].reshape(shape)
                out[relative(piece, self.my_owned)] += chunk
        return out

    def free(self) -> None:
        """Release the MPI datatypes."""
        for t in self._types:
            t.Free()
        self._types.clear()


class _EmptyBuffers(dict[str, Array]):
    def __missing__(self, key: str) -> Array:
        value = np.empty(0, dtype=np.dtype(key))
        self[key] = value
        return value


_EMPTY = _EmptyBuffers()


def _meet(a: Box | None, b: Box | None) -> Box | None:
    if a is None or b is None:
        return None
    return intersect(a, b)


def _contiguous_offset(piece: Box, outer: Box) -> int | None:
    """Element offset of ``piece`` in a C-ordered array of ``outer`` if it is one run."""
    inner, full = box_shape(piece), box_shape(outer)
    axis = next((d for d, n in enumerate(inner) if n != 1), len(inner))
    if any(inner[d] != full[d] for d in range(axis + 1, len(inner))):
        return None
    start = tuple(a - o for (a, _), (o, _) in zip(piece, outer, strict=True))
    return int(np.ravel_multi_index(start, full))


def _disjoint(boxes: Sequence[Box | None]) -> bool:
    present = [b for b in boxes if b is not None and box_volume(b) > 0]
    return all(
        intersect(present[i], present[j]) is None
        for i in range(len(present))
        for j in range(i + 1, len(present))
    )
