"""Multi-dimensional scatterv/gatherv of boxes of a tensor.

Every participant owns one box of a global tensor and needs one box of it.  ``gather`` moves
the intersection of each owner's box with each needer's box straight from the owner's array
into the needer's array: one nonblocking message per overlapping pair, described by an MPI
subarray datatype (or a plain count when the piece is one run of memory), so nothing is
packed in Python; a worker's piece of its own data is a numpy copy.  ``scatter_add`` is the
exact adjoint: each needer sends its pieces back and the owners add what they receive
(pieces overlap when needs overlap, as halos do).  Intersections and datatypes are built
once per structure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.runtime._mpi import mpi, mpi_datatype
from spmdrules.runtime.decomposition import Box, box_shape, box_volume, intersect, relative

Array = np.ndarray[Any, Any]

# Point-to-point tags: every pair exchanges at most one message per direction per call.
TAG_BOX_GATHER = 4301
TAG_BOX_SCATTER = 4302


class _Piece:
    """One overlap between this worker's array (of box ``outer``) and a peer."""

    def __init__(self, peer: int, box: Box, outer: Box, base: Any) -> None:
        self.peer = peer
        self.box = box
        self.where = relative(box, outer)
        self.volume = box_volume(box)
        self.offset = _contiguous_offset(box, outer)
        self.mpi_type: Any = None
        if self.offset is None:
            self.mpi_type = base.Create_subarray(
                list(box_shape(outer)),
                list(box_shape(box)),
                [s.start for s in self.where],
                order=mpi().ORDER_C,
            ).Commit()

    def spec(self, array: Array, base: Any) -> list[Any]:
        """The mpi4py message spec for this piece of ``array`` (C-contiguous)."""
        if self.offset is None:
            return [array, 1, self.mpi_type]
        return [array.reshape(-1)[self.offset : self.offset + self.volume], base]


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
        self.me = my_slot
        self.dtype = dtype
        self._base = mpi_datatype(dtype)
        self.my_owned = owned[my_slot]
        self.my_needed = needed[my_slot]
        # pieces of my owned array that peers need, and of my needed array that peers own
        self.sends: list[_Piece] = []
        self.recvs: list[_Piece] = []
        self.self_piece: Box | None = None
        for p in range(len(owned)):
            out_box = _meet(self.my_owned, needed[p])
            in_box = _meet(owned[p], self.my_needed)
            if p == my_slot:
                self.self_piece = out_box
                continue
            if out_box is not None and self.my_owned is not None:
                self.sends.append(_Piece(p, out_box, self.my_owned, self._base))
            if in_box is not None and self.my_needed is not None:
                self.recvs.append(_Piece(p, in_box, self.my_needed, self._base))
        self._disjoint = _disjoint(needed)
        # scatter_add with overlapping needs receives into a packed staging buffer
        self._staging = np.empty(0 if self._disjoint else sum(s.volume for s in self.sends),
                                 dtype=dtype)
        covered = sum(s.volume for s in self.sends) + (
            box_volume(self.self_piece) if self.self_piece else 0
        )
        self._covers_owned = self.my_owned is not None and covered == box_volume(self.my_owned)
        self.bytes_gather = sum(s.volume for s in self.sends) * dtype.itemsize
        self.bytes_scatter = sum(r.volume for r in self.recvs) * dtype.itemsize

    def gather(self, x: Array, out: Array) -> Array:
        """Fill ``out`` (this worker's needed box) from the owners' arrays."""
        MPI = mpi()
        src = np.ascontiguousarray(x)
        reqs = [self.comm.Irecv(r.spec(out, self._base), r.peer, TAG_BOX_GATHER)
                for r in self.recvs]
        reqs += [self.comm.Isend(s.spec(src, self._base), s.peer, TAG_BOX_GATHER)
                 for s in self.sends]
        if self.self_piece is not None:
            assert self.my_owned is not None and self.my_needed is not None
            out[relative(self.self_piece, self.my_needed)] = src[
                relative(self.self_piece, self.my_owned)
            ]
        MPI.Request.Waitall(reqs)
        return out

    def scatter_add(self, grad: Array, out: Array) -> Array:
        """Adjoint of :meth:`gather`: return each needed piece to its owner and sum there."""
        MPI = mpi()
        src = np.ascontiguousarray(grad)
        if self.my_owned is not None and not (self._disjoint and self._covers_owned):
            out.fill(0)
        reqs = [self.comm.Isend(r.spec(src, self._base), r.peer, TAG_BOX_SCATTER)
                for r in self.recvs]
        staged: list[tuple[_Piece, Array]] = []
        offset = 0
        for s in self.sends:
            if self._disjoint:
                reqs.append(self.comm.Irecv(s.spec(out, self._base), s.peer, TAG_BOX_SCATTER))
            else:
                chunk = self._staging[offset : offset + s.volume]
                offset += s.volume
                staged.append((s, chunk))
                reqs.append(self.comm.Irecv([chunk, self._base], s.peer, TAG_BOX_SCATTER))
        if self.self_piece is not None:
            assert self.my_owned is not None and self.my_needed is not None
            mine = src[relative(self.self_piece, self.my_needed)]
            if self._disjoint:  # nobody else writes these entries
                out[relative(self.self_piece, self.my_owned)] = mine
            else:
                out[relative(self.self_piece, self.my_owned)] += mine
        MPI.Request.Waitall(reqs)
        for s, chunk in staged:
            out[s.where] += chunk.reshape(box_shape(s.box))
        return out

    def free(self) -> None:
        """Release the MPI datatypes."""
        for piece in (*self.sends, *self.recvs):
            if piece.mpi_type is not None:
                piece.mpi_type.Free()
                piece.mpi_type = None


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
