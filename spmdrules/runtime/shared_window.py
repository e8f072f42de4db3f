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

import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.runtime._mpi import PAGE, mpi
from spmdrules.runtime.errors import SharedMemoryFallbackWarning

#: where MPICH places shared-memory windows
SHM_DIR = "/dev/shm"
#: free bytes a window leaves in /dev/shm for everything else (MPICH's own queues, other jobs)
SHM_RESERVE = 16 * 1024 * 1024
#: environment variable that overrides the free bytes seen in /dev/shm (to test the fallback)
SHM_FREE_ENV = "SPMDRULES_SHM_FREE_BYTES"


def shm_free_bytes() -> int:
    """Bytes free in /dev/shm (a container's default is only 64 MiB)."""
    forced = os.environ.get(SHM_FREE_ENV)
    if forced is not None:
        return int(forced)
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize

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

    def _need(
        self,
        shapes: Sequence[tuple[int, ...] | None],
        dtype: np.dtype[Any],
        page_offsets: Sequence[int] | None,
    ) -> tuple[list[int], int]:
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
        return starts, need

    def room_for(
        self,
        shapes: Sequence[tuple[int, ...] | None],
        dtype: np.dtype[Any],
        page_offsets: Sequence[int] | None = None,
    ) -> bool:
        """True if the window can hold these outputs; False, with a
        :class:`SharedMemoryFallbackWarning`, if growing it would not fit in /dev/shm (the
        caller then moves the data by plain messages). Collective, like :meth:`arrays`: every
        worker gets the same answer."""
        _, need = self._need(shapes, dtype, page_offsets)
        if self._window is not None and need <= self._capacity:
            return True
        capacity = -(-max(need, 2 * self._capacity, PAGE) // PAGE) * PAGE
        total = capacity * self.comm.Get_size()
        free = shm_free_bytes()
        fits = bool(self.comm.allreduce(free >= total + SHM_RESERVE, op=mpi().LAND))
        if not fits:
            warnings.warn(
                SharedMemoryFallbackWarning(
                    f"a shared-memory window of {total} bytes does not fit in {SHM_DIR} "
                    f"({free} bytes free, {SHM_RESERVE} kept in reserve): the data moves by "
                    "plain messages instead (slower for large strided pieces). Enlarge "
                    f"{SHM_DIR} (docker run --shm-size=...) to use the direct path"
                ),
                stacklevel=3,
            )
        return fits

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
        starts, need = self._need(shapes, dtype, page_offsets)
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
