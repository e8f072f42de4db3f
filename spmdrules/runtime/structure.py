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
from spmdrules.runtime.partition import sub_communicator

# The structure of one worker's local tensor, or None if it contributes none.
LocalStructure = tuple[np.dtype[Any], tuple[int, ...]] | None

PlanT = TypeVar("PlanT")

# How many distinct input structures keep their plans and buffers alive per layer.
PLAN_CACHE_SIZE = 4


class StructureExchange:
    """Allgather of structure headers over a fixed set of root ranks."""

    def __init__(self, root: Any, members: Sequence[int]) -> None:
        self.members = tuple(members)
        self.comm = sub_communicator(root, self.members)
        self._send = np.zeros(HEADER_LEN, dtype=np.int64)
        self._recv = np.zeros((len(self.members), HEADER_LEN), dtype=np.int64)

    def exchange(self, local: np.ndarray[Any, Any] | None, what: str) -> bytes:
        """Share this worker's header; return the gathered headers as a hashable key."""
        if local is None:
            self._send[:] = 0
            self._send[0] = -1
        else:
            write_header(self._send, local, what)
        self.comm.Allgather(self._send, self._recv)
        return self._recv.tobytes()

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
