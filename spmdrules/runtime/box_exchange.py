"""Multi-dimensional scatterv/gatherv of boxes of a tensor.

Every participant owns one box of a global tensor and needs one box of it.  ``gather`` moves
the intersection of each owner's box with each needer's box from the owner's array into the
needer's array: one nonblocking message per overlapping pair, straight from and into the
arrays when the piece is one run of memory; a strided piece goes through a staging buffer
that numpy packs if it is small, or travels with an MPI subarray datatype if it is large
(buffers and datatypes belong to the plan, so a steady call allocates nothing); a worker's
piece of its own data is a numpy copy.  With the needers' arrays in a shared-memory window
(``bind_shared``), owners instead copy their pieces straight into them.  ``scatter_add`` is
the exact adjoint: each needer sends its pieces back and the owners add what they receive
(pieces overlap when needs overlap, as halos do).  Intersections and buffers are built once
per structure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.runtime._mpi import is_half, mpi, mpi_datatype
from spmdrules.runtime.decomposition import (
    Box,
    aligned_empty,
    box_shape,
    box_volume,
    intersect,
    relative,
)

Array = np.ndarray[Any, Any]

# Point-to-point tags: every pair exchanges at most one message per direction and tag per
# call.
TAG_BOX_GATHER = 4301
TAG_BOX_SCATTER = 4302
TAG_BOX_READY = 4303  # direct gather: the needer's output may be overwritten
TAG_BOX_DONE = 4304  # direct gather: the owner has written its piece


# Strided pieces of at least this many bytes travel with an MPI subarray datatype (MPI packs
# and unpacks them without a numpy copy); smaller ones are staged.  Measured on MPICH with
# the CMA single-copy path: staging wins while a piece fits in L2 (the staged copy is read
# back from cache), the datatype wins beyond (staging would be a second pass over memory).
DATATYPE_MIN_BYTES = (1 << 20) + 1


class _Piece:
    """One overlap between this worker's array (of box ``outer``) and a peer.

    A piece that is one run of memory travels straight from or into the array.  A large
    strided piece travels with a subarray datatype over the whole array; any other piece
    goes through a staging buffer allocated once with the plan and filled or emptied by
    numpy.
    """

    def __init__(self, peer: int, box: Box, outer: Box, dtype: np.dtype[Any]) -> None:
        self.peer = peer
        self.box = box
        self.shape = box_shape(box)
        self.where = relative(box, outer)
        self.volume = box_volume(box)
        self.offset = _contiguous_offset(box, outer)
        self.mtype: Any = mpi_datatype(dtype)
        self.count = self.volume
        self.stage: Array | None = None
        self.strided = False
        if self.offset is None and self.volume * dtype.itemsize >= DATATYPE_MIN_BYTES:
            self.strided = True
            self.count = 1
            self.mtype = self.mtype.Create_subarray(
                list(box_shape(outer)),
                list(self.shape),
                [a - o for (a, _), (o, _) in zip(box, outer, strict=True)],
            ).Commit()
        elif self.offset is None:
            self.stage = aligned_empty(self.shape, dtype)

    def spec(self, array: Array) -> list[Any]:
        """The MPI buffer of this piece of ``array`` (C-contiguous, of the outer box)."""
        if self.strided:
            return [array, 1, self.mtype]
        if self.stage is not None:
            return [self.stage, self.count, self.mtype]
        assert self.offset is not None
        return [array.reshape(-1)[self.offset : self.offset + self.volume], self.count,
                self.mtype]

    def pack(self, array: Array) -> list[Any]:
        """The MPI buffer of this piece of ``array``, staged first if need be."""
        if self.stage is not None:
            np.copyto(self.stage, array[self.where])
        return self.spec(array)

    def unpack(self, array: Array) -> None:
        """Move a staged received piece into ``array``."""
        if self.stage is not None:
            array[self.where] = self.stage


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
        self._needed = tuple(needed)
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
                self.sends.append(_Piece(p, out_box, self.my_owned, dtype))
            if in_box is not None and self.my_needed is not None:
                self.recvs.append(_Piece(p, in_box, self.my_needed, dtype))
        # Staggered order, like MPI_Alltoallv: send to the next slots first and receive from
        # the previous ones first, so workers do not all start on the same peer.
        k = len(owned)
        self.sends.sort(key=lambda piece: (piece.peer - my_slot) % k)
        self.recvs.sort(key=lambda piece: (my_slot - piece.peer) % k)
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
        self._self_in: tuple[slice, ...] | None = None
        self._self_out: tuple[slice, ...] | None = None
        if self.self_piece is not None:
            assert self.my_owned is not None and self.my_needed is not None
            self._self_in = relative(self.self_piece, self.my_owned)
            self._self_out = relative(self.self_piece, self.my_needed)
        # persistent requests of gather (see bind)
        self._bound_out: Array | None = None
        self._bound_recvs: list[Any] = []
        self._send_requests: list[Any] = [None] * len(self.sends)
        # direct gather (see bind_shared)
        self._window: Any = None
        self._writes: list[tuple[tuple[slice, ...], Array]] = []  # per send: source, target
        self._ready: list[Any] = []  # per send: the needer's go-ahead
        self._done: list[Any] = []  # per send: tell the needer its piece is written
        self._handshake: list[Any] = []  # go-aheads to my owners, their done notices

    def bind(self, out: Array) -> None:
        """Fix the array :meth:`gather` fills (a buffer of the caller's plan).

        The receives into it and the sends from staging buffers then become persistent
        requests, made once: a steady gather into ``out`` only starts them.
        """
        self.free()
        comm = self.comm
        self._bound_out = out
        self._bound_recvs = [comm.Recv_init(r.spec(out), r.peer, TAG_BOX_GATHER)
                             for r in self.recvs]
        self._send_requests = [
            comm.Send_init(s.spec(out), s.peer, TAG_BOX_GATHER) if s.stage is not None else None
            for s in self.sends
        ]

    def bind_shared(self, window: Any, outputs: Sequence[Array | None]) -> None:
        """Gather by writing straight into the needers' arrays (``outputs``, by slot, in the
        shared-memory ``window``; see :mod:`spmdrules.runtime.shared_window`).

        Collective: every worker of the exchange binds alike, since the handshake replaces
        the data messages.  Each call, a needer tells each of its owners that its array may
        be overwritten (its previous output is then dead), each owner copies its pieces in
        with numpy and reports back, and the needer waits for every report.
        """
        self.free()
        comm = self.comm
        out = outputs[self.me]
        self._bound_out = out
        self._window = window
        none = np.empty(0, dtype=np.uint8)
        byte = mpi().BYTE
        self._writes = []
        for s in self.sends:
            target = outputs[s.peer]
            box = self._needed[s.peer]
            assert target is not None and box is not None
            self._writes.append((s.where, target[relative(s.box, box)]))
        self._ready = [comm.Recv_init([none, byte], s.peer, TAG_BOX_READY) for s in self.sends]
        self._done = [comm.Send_init([none, byte], s.peer, TAG_BOX_DONE) for s in self.sends]
        self._handshake = [
            *(comm.Send_init([none, byte], r.peer, TAG_BOX_READY) for r in self.recvs),
            *(comm.Recv_init([none, byte], r.peer, TAG_BOX_DONE) for r in self.recvs),
        ]

    def free(self) -> None:
        """Free the persistent requests made by :meth:`bind` or :meth:`bind_shared`."""
        for request in (*self._bound_recvs, *self._send_requests, *self._ready, *self._done,
                        *self._handshake):
            if request is not None:
                request.Free()
        self._bound_out = None
        self._bound_recvs = []
        self._send_requests = [None] * len(self.sends)
        self._window = None
        self._writes, self._ready, self._done, self._handshake = [], [], [], []

    def _gather_direct(self, src: Array, out: Array) -> None:
        MPI = mpi()
        MPI.Prequest.Startall(self._ready)
        MPI.Prequest.Startall(self._handshake)
        if self._self_in is not None and self._self_out is not None:
            out[self._self_out] = src[self._self_in]
        # Waitall, not Waitany (copying for whichever needer is ready first): with Waitany
        # a 1 MiB repartition over 4 ranks on 2 cores ran 10x slower, apparently because it
        # polls without yielding the CPU to the ranks it waits for
        MPI.Request.Waitall(self._ready)
        for where, target in self._writes:
            np.copyto(target, src[where])
        if self._writes:
            self._window.Sync()  # the pieces are in memory before the needers hear of it
            MPI.Prequest.Startall(self._done)
            MPI.Request.Waitall(self._done)
        MPI.Request.Waitall(self._handshake)
        self._window.Sync()  # and this worker reads its pieces only after the reports

    def gather(self, x: Array, out: Array) -> Array:
        """Fill ``out`` (this worker's needed box) from the owners' arrays."""
        MPI = mpi()
        src = np.ascontiguousarray(x)
        comm = self.comm
        if self._window is not None:
            # a worker needing nothing may pass any array: it only writes to others
            assert out is self._bound_out or self.my_needed is None
            self._gather_direct(src, out)
            return out
        if out is self._bound_out:
            MPI.Prequest.Startall(self._bound_recvs)
            reqs = list(self._bound_recvs)
        else:
            reqs = [comm.Irecv(r.spec(out), r.peer, TAG_BOX_GATHER) for r in self.recvs]
        # pack every staged piece before sending any: MPI calls between the copies only
        # spend time in the progress engine
        specs = [s.pack(src) for s in self.sends]
        for s, spec, persistent in zip(self.sends, specs, self._send_requests, strict=True):
            if persistent is None:
                reqs.append(comm.Isend(spec, s.peer, TAG_BOX_GATHER))
            else:
                persistent.Start()
                reqs.append(persistent)
        if self._self_in is not None and self._self_out is not None:
            out[self._self_out] = src[self._self_in]
        MPI.Request.Waitall(reqs)
        for r in self.recvs:
            r.unpack(out)
        return out

    def scatter_add(self, grad: Array, out: Array) -> Array:
        """Adjoint of :meth:`gather`: return each needed piece to its owner and sum there."""
        MPI = mpi()
        src = np.ascontiguousarray(grad)
        base, comm = self._base, self.comm
        if self.my_owned is not None and not (self._disjoint and self._covers_owned):
            out.fill(0)
        reqs = [comm.Isend(r.pack(src), r.peer, TAG_BOX_SCATTER) for r in self.recvs]
        staged: list[tuple[_Piece, Array]] = []
        offset = 0
        for s in self.sends:
            if self._disjoint:
                reqs.append(comm.Irecv(s.spec(out), s.peer, TAG_BOX_SCATTER))
            else:
                chunk = self._staging[offset : offset + s.volume]
                offset += s.volume
                staged.append((s, chunk))
                reqs.append(comm.Irecv([chunk, base], s.peer, TAG_BOX_SCATTER))
        # overlapping pieces are summed; float16/bfloat16 sums accumulate in float32
        acc = out.astype(np.float32) if staged and is_half(out.dtype) else out
        if self.self_piece is not None:
            assert self.my_owned is not None and self.my_needed is not None
            mine = src[relative(self.self_piece, self.my_needed)]
            if self._disjoint:  # nobody else writes these entries
                out[relative(self.self_piece, self.my_owned)] = mine
            else:
                acc[relative(self.self_piece, self.my_owned)] += mine
        MPI.Request.Waitall(reqs)
        if self._disjoint:
            for s in self.sends:
                s.unpack(out)
        for s, chunk in staged:
            acc[s.where] += chunk.reshape(s.shape)
        if acc is not out:
            np.copyto(out, acc, casting="unsafe")
        return out


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
