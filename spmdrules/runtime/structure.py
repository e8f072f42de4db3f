"""Per-call agreement on tensor structure among the workers of a layer.

Workers that only receive do not know the shape or dtype they will get, and a worker
holding a wrongly shaped tensor must make *every* participant fail, not hang.  So each call
begins with one small Allgather of fixed-length headers over all participants; everyone
then validates the same information and raises the same error, and the gathered headers
key the cache of per-structure plans and buffers.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from spmdrules.runtime._mpi import HEADER_LEN, decode_header, write_header
from spmdrules.runtime.errors import TensorStructureError
from spmdrules.runtime.partition import free_communicator, sub_communicator

# The structure of one worker's local tensor, or None if it contributes none.
LocalStructure = tuple[np.dtype[Any], tuple[int, ...]] | None

PlanT = TypeVar("PlanT")

# How many distinct input structures keep their plans and buffers alive per layer.
PLAN_CACHE_SIZE = 4


class StructureExchange:
    """Allgather of structure headers over a fixed set of root ranks."""

    def __init__(self, root: Any, members: Sequence[int], *, check: bool = True) -> None:
        self.members = tuple(members)
        self.comm = sub_communicator(root, self.members)
        self.check = check
        self._slot = self.members.index(root.Get_rank()) if root.Get_rank() in members else -1
        self._send = np.zeros(HEADER_LEN, dtype=np.int64)
        self._recv = np.zeros((len(self.members), HEADER_LEN), dtype=np.int64)
        self._key: bytes | None = None
        self._owns_comm = True

    def free(self) -> None:
        """Free the communicator (collective over the members; twins share it)."""
        if self._owns_comm:
            free_communicator(self.comm)
            self._owns_comm = False

    def twin(self) -> StructureExchange:
        """Another exchange over the same communicator, with its own agreed structure."""
        other = StructureExchange.__new__(StructureExchange)
        other.members, other.comm, other.check, other._slot = (
            self.members, self.comm, self.check, self._slot
        )
        other._send = np.zeros_like(self._send)
        other._recv = np.zeros_like(self._recv)
        other._key = None
        other._owns_comm = False
        return other

    def exchange(self, local: np.ndarray[Any, Any] | None, what: str) -> bytes:
        """Share this worker's header; return the gathered headers as a hashable key.

        With ``check=False`` only the first call communicates; later calls reuse the agreed
        structure and only verify this worker's own header locally.
        """
        if local is None:
            self._send[:] = 0
            self._send[0] = -1
        else:
            write_header(self._send, local, what)
        if not self.check and self._key is not None:
            if not np.array_equal(self._send, self._recv[self._slot]):
                raise TensorStructureError(
                    f"{what}: this worker's local tensor changed structure, but the layer was "
                    "built with check_structure=False, which fixes the structure after the "
                    "first call; build the layer with check_structure=True (the default) to "
                    "change structures between calls"
                )
            return self._key
        self.comm.Allgather(self._send, self._recv)
        self._key = self._recv.tobytes()
        return self._key

    def structures(self) -> list[LocalStructure]:
        """The structures from the last exchange, one per member (in member order)."""
        return [None if row[0] < 0 else decode_header(row) for row in self._recv]


class PlanCache(Generic[PlanT]):
    """A small LRU cache of plans keyed by gathered structure headers."""

    def __init__(self) -> None:
        self._plans: OrderedDict[bytes, PlanT] = OrderedDict()

    def get(self, key: bytes, build: Callable[[], PlanT]) -> PlanT:
        plan = self._plans.get(key)
        if plan is None:
            plan = build()
            self._plans[key] = plan
            while len(self._plans) > PLAN_CACHE_SIZE:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return plan
