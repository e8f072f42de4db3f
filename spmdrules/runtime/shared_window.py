"""Output buffers in an MPI shared-memory window, for exchanges that write into them directly.

When every worker of a communicator runs on one node, the workers can place their output
arrays in one shared-memory window (``MPI_Win_allocate_shared``); an owner then copies its
piece of a peer's output straight into the peer's array with numpy.  A strided piece costs
one copy, as a contiguous one does: sending it through MPI costs a pack (by numpy or by
MPI's datatype engine) on top of the transfer, because MPICH moves only contiguous send
buffers in a single copy.

Every worker of the communicator has one segment of the window, reused by all structures
(plans) of one direction of a layer: outputs of different structures share memory, which
the contract allows (an output is valid until the next call).  A window only grows, by
allocating a larger one (collectively, while plans are built); outgrown windows stay
mapped until :meth:`SharedOutputs.free`, so arrays already returned never dangle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.runtime._mpi import PAGE, mpi

Array = np.ndarray[Any, Any]


class SharedOutputs:
    """The shared-memory segments of the workers of ``comm`` (one each)."""

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self._one_node: bool | None = None  # decided collectively on first use
        self._window: Any = None
        self._capacity = 0  # bytes of every worker's segment
        self._segments: list[memoryview] = []
        self._outgrown: list[Any] = []

    def usable(self) -> bool:
        """True if every worker shares memory with every other (collective on first call)."""
        if self._one_node is None:
            MPI = mpi()
            node = self.comm.Split_type(MPI.COMM_TYPE_SHARED)
            self._one_node = node.Get_size() == self.comm.Get_size()
            node.Free()
        return self._one_node

    def arrays(
        self,
        shapes: Sequence[tuple[int, ...] | None],
        dtype: np.dtype[Any],
        page_offsets: Sequence[int] | None = None,
    ) -> tuple[Any, list[Array | None]]:
        """The window and every worker's output array in it, of the given shapes (None: no
        output), in slot order, each starting ``page_offsets[slot]`` bytes (rounded down to
        the dtype's alignment) into a page of its segment.

        Collective: call on every worker with the same arguments (growth is decided from
        them, identically everywhere).
        """
        starts = [
            0 if page_offsets is None else page_offsets[slot] % PAGE // dtype.alignment
            * dtype.alignment
            for slot in range(len(shapes))
        ]
        need = max(
            (
                start + int(np.prod(s, dtype=np.int64)) * dtype.itemsize
                for s, start in zip(shapes, starts, strict=True)
                if s is not None
            ),
            default=0,
        )
        if need > self._capacity or self._window is None:
            self._grow(max(need, 2 * self._capacity, PAGE))
        return self._window, [
            None
            if shape is None
            else np.frombuffer(
                self._segments[slot],
                dtype=dtype,
                count=int(np.prod(shape, dtype=np.int64)),
                offset=start,
            ).reshape(shape)
            for slot, (shape, start) in enumerate(zip(shapes, starts, strict=True))
        ]

    def _grow(self, nbytes: int) -> None:
        MPI = mpi()
        capacity = -(-nbytes // PAGE) * PAGE
        info = MPI.Info.Create()
        info.Set("alloc_shared_noncontig", "true")  # page-aligned segments
        try:
            window = MPI.Win.Allocate_shared(capacity, 1, info, comm=self.comm)
        finally:
            info.Free()
        window.Lock_all(MPI.MODE_NOCHECK)  # a passive epoch, so sync() may order memory
        if self._window is not None:
            self._outgrown.append(self._window)
        self._window, self._capacity = window, capacity
        self._segments = [
            memoryview(window.Shared_query(slot)[0]).cast("B")[:capacity]
            for slot in range(self.comm.Get_size())
        ]

    def free(self) -> None:
        """Release the windows (collective; arrays returned earlier become invalid)."""
        for window in (*self._outgrown, *([self._window] if self._window is not None else [])):
            window.Unlock_all()
            window.Free()
        self._window, self._outgrown, self._segments, self._capacity = None, [], [], 0
