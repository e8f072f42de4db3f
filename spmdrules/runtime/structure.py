"""Agreement on tensor structure among the workers of a layer, off the steady path.

Workers that only receive do not know the shape or dtype they will get, and a worker
holding a wrongly shaped tensor must make *every* participant fail, not hang.  So every
worker shares a fixed-length header (dtype and shape) with all participants, everyone
validates the same information and raises the same error, and the gathered headers key the
cache of per-structure plans and buffers.

The first call of a layer (and the first after a refusal) gathers the headers before it
moves data.  Later calls *speculate*: they move the data with the plan of the structure
agreed last, while the header Allgather (a persistent nonblocking collective) is in flight,
and only then compare.  A worker whose own tensor does not match the agreed structure takes
part in the speculative movement with a scratch array of the agreed shape, so the message
sizes always match and nobody hangs.  If any header differs from the agreed ones, every
worker sees it in the gathered headers, discards the speculative result, builds (or
refuses) the plan of the new structure, and moves the data again.  So a steady call costs
no extra round trip: the check overlaps the data movement.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from spmdrules.runtime._mpi import (
    HEADER_LEN,
    MAX_NDIM,
    PAGE_OFFSET_SLOT,
    STRUCTURE_LEN,
    SUPPORTED_NAMES,
    decode_header,
    is_supported,
    write_header,
)
from spmdrules.runtime.errors import TensorStructureError
from spmdrules.runtime.partition import free_communicator, sub_communicator

Array = np.ndarray[Any, Any]

# The structure of one worker's local tensor, or None if it contributes none.
LocalStructure = tuple[np.dtype[Any], tuple[int, ...]] | None

PlanT = TypeVar("PlanT")

# How many distinct input structures keep their plans and buffers alive per layer.
PLAN_CACHE_SIZE = 4

# Header codes (entry 0) besides dtype codes: no tensor, and tensors that cannot be described.
NO_TENSOR = -1
BAD_DTYPE = -2
BAD_NDIM = -3


class StructureExchange:
    """Allgather of structure headers over a fixed set of root ranks."""

    def __init__(self, root: Any, members: Sequence[int], *, check: bool = True,
                 twin_of: StructureExchange | None = None) -> None:
        """``twin_of``: share that exchange's communicator (which it keeps owning)."""
        self.root = root
        self.members = tuple(members)
        self.check = check
        self._slot = self.members.index(root.Get_rank()) if root.Get_rank() in members else -1
        self.comm: Any = sub_communicator(root, self.members) if twin_of is None else twin_of.comm
        self._owns_comm = twin_of is None
        self._send = np.zeros(HEADER_LEN, dtype=np.int64)
        self._recv = np.zeros((len(self.members), HEADER_LEN), dtype=np.int64)
        self._agreed = np.zeros_like(self._recv)
        # the structure part of the headers (the page offsets are hints, not compared)
        self._send_view = self._send[:STRUCTURE_LEN].data
        self._recv_view = self._recv[:, :STRUCTURE_LEN].data
        self._agreed_view = self._agreed[:, :STRUCTURE_LEN].data
        self._agreed_mine = self._agreed[max(self._slot, 0), :STRUCTURE_LEN].data
        self._key: bytes | None = None  # the agreed structure (gathered headers as bytes)
        self._request: Any = None  # persistent Allgather, made on first speculative call
        self._pending = False  # a started check not yet waited for
        self._gathered = False  # self._recv holds this call's headers
        self._local_ok = False
        self._local_error = ""
        self._last_written: np.dtype[Any] | None = None  # structure last in self._send
        self._last_shape: tuple[int, ...] = ()

    def free(self) -> None:
        """Free the communicator (collective over the members; twins share it)."""
        if self._request is not None:
            self._request.Free()
            self._request = None
        if self._owns_comm:
            free_communicator(self.comm)
            self._owns_comm = False

    def twin(self) -> StructureExchange:
        """Another exchange over the same communicator, with its own agreed structure."""
        return StructureExchange(self.root, self.members, check=self.check, twin_of=self)

    # -- headers -----------------------------------------------------------------------
    def _write(self, local: Array | None) -> None:
        """Write this worker's header; a tensor the runtime cannot move gets an error code
        (raised on every worker once the headers are gathered, never before: a local raise
        would leave the others waiting)."""
        header = self._send
        if local is None:
            if self._last_written is not None or header[0] != NO_TENSOR:
                header[:] = 0
                header[0] = NO_TENSOR
                self._last_written = None
            return
        last = self._last_written
        if last is not None and local.shape == self._last_shape and local.dtype == last:
            # Unchanged structure: keep the header (its page offset is a hint and may be
            # that of an earlier input).
            return
        self._last_written = None
        if local.ndim > MAX_NDIM or not is_supported(local.dtype):
            header[:] = 0
            header[0] = BAD_NDIM if local.ndim > MAX_NDIM else BAD_DTYPE
            self._local_error = (
                f"arrays of dimension {local.ndim} are not supported (at most {MAX_NDIM}); "
                "reshape the tensor to fewer dimensions"
                if local.ndim > MAX_NDIM
                else f"dtype {local.dtype.name} is not supported; convert the array to one of "
                + SUPPORTED_NAMES
            )
            return
        write_header(header, local, "")
        self._last_written, self._last_shape = local.dtype, local.shape

    def _raise_invalid(self, what: str) -> None:
        codes = self._recv[:, 0]
        if codes.min() > BAD_DTYPE:
            return
        if self._send[0] <= BAD_DTYPE:
            raise TensorStructureError(f"{what}: this worker's local tensor: {self._local_error}")
        slot = int(np.argmax(codes <= BAD_DTYPE))
        reason = "an unsupported dtype" if codes[slot] == BAD_DTYPE else "too many dimensions"
        raise TensorStructureError(
            f"{what}: the worker of root rank {self.members[slot]} passed a local tensor with "
            f"{reason}; every worker of the layer refuses the call (see that worker's error)"
        )

    def _allgather(self) -> None:
        self.comm.Allgather(self._send, self._recv)
        self._gathered = True

    # -- blocking agreement (every call) -------------------------------------------------
    def exchange(self, local: Array | None, what: str) -> bytes:
        """Share this worker's header and return the gathered headers as a hashable key.

        Blocking: the headers of every member are known on return.  With ``check=False``
        only the first call communicates; later calls reuse the agreed structure and only
        verify this worker's own header locally.
        """
        self._write(local)
        if not self.check and self._key is not None:
            if not self._send_view == self._agreed_mine:
                raise _unchecked_change(what)
            return self._key
        self._allgather()
        self._raise_invalid(what)
        self._key = self._gathered_key()
        np.copyto(self._agreed, self._recv)
        return self._key

    # -- speculative agreement -----------------------------------------------------------
    def start(self, local: Array | None) -> bytes | None:
        """Begin this call's agreement.

        Returns the agreed structure's key if the call may move data speculatively with its
        plan (then :meth:`settle` tells whether that stands), or None if there is no agreed
        structure yet; then the headers are gathered before returning.
        """
        self._write(local)
        self._gathered = False
        if self._key is None:
            self._local_ok = False
            self._allgather()
            return None
        self._local_ok = self._send_view == self._agreed_mine
        if self.check:
            if self._request is None:
                self._request = self.comm.Allgather_init(self._send, self._recv)
            self._request.Start()
            self._pending = True
        return self._key

    @property
    def local_ok(self) -> bool:
        """This worker's tensor has the agreed structure (valid after :meth:`start`)."""
        return self._local_ok

    def settle(self, what: str) -> bool:
        """Finish the check: True if every worker's structure is the agreed one.

        False (on every worker alike) means the speculative data movement must be discarded
        and redone with the plan of the headers :meth:`gather` returns.  With
        ``check=False`` there is no check: a worker whose own tensor changed raises alone,
        after the data movement.
        """
        if self._pending:
            self._request.Wait()
            self._pending = False
            self._gathered = True
            return bool(self._recv_view == self._agreed_view)
        if self._gathered:
            return False
        if not self._local_ok:
            raise _unchecked_change(what)
        return True

    def gather(self, what: str) -> bytes:
        """The gathered headers of this call as a key (gathering them now if need be);
        refuse tensors the runtime cannot describe, on every worker."""
        if self._pending:
            self._request.Wait()
            self._pending = False
            self._gathered = True
        elif not self._gathered:
            self._allgather()
        self._raise_invalid(what)
        return self._gathered_key()

    def _gathered_key(self) -> bytes:
        return self._recv[:, :STRUCTURE_LEN].tobytes()

    def page_offsets(self) -> list[int]:
        """Where each member's tensor starts in its memory page (from the last gathering)."""
        return [int(o) for o in self._recv[:, PAGE_OFFSET_SLOT]]

    def agree(self) -> None:
        """Adopt the gathered headers as the agreed structure (once their plan is built)."""
        np.copyto(self._agreed, self._recv)
        self._key = self._gathered_key()

    def forget(self) -> None:
        """Drop the agreed structure: the next call gathers headers before moving data."""
        self._key = None

    def scratch(self) -> Array | None:
        """A zero array of this worker's agreed structure, to stand in for a changed input."""
        row = self._agreed[self._slot]
        if row[0] < 0:
            return None
        dtype, shape = decode_header(row)
        return np.zeros(shape, dtype=dtype)

    def structures(self) -> list[LocalStructure]:
        """The structures from the last gathering, one per member (in member order)."""
        return [None if row[0] < 0 else decode_header(row) for row in self._recv]



def _unchecked_change(what: str) -> TensorStructureError:
    return TensorStructureError(
        f"{what}: this worker's local tensor changed structure, but the layer was built "
        "with check_structure=False, which fixes the structure after the first call; build "
        "the layer with check_structure=True (the default) to change structures between calls"
    )


def speculate(
    ex: StructureExchange,
    plans: PlanCache[PlanT],
    local: Array | None,
    what: str,
    build: Callable[[], PlanT],
    move: Callable[[PlanT, Array | None], object],
    extra_key: bytes = b"",
) -> PlanT:
    """Run one call of a layer: agree on the structure and move the data with its plan.

    ``build`` makes the plan of the gathered structures (:meth:`StructureExchange.
    structures`) and raises on invalid ones, identically on every worker; ``move(plan,
    local)`` moves the data; ``extra_key`` is state every worker shares that the plan also
    depends on.  Steady calls move data once, with the check overlapping it.
    """
    key = ex.start(local)
    if key is not None:
        plan = plans.peek(key + extra_key)
        if plan is not None:
            move(plan, local if ex.local_ok else ex.scratch())
            if ex.settle(what):
                return plan
    gathered = ex.gather(what)
    try:
        plan = plans.get(gathered + extra_key, build)
    except BaseException:
        ex.forget()
        raise
    ex.agree()
    move(plan, local)
    return plan


class PlanCache(Generic[PlanT]):
    """A small LRU cache of plans keyed by gathered structure headers."""

    def __init__(self, on_evict: Callable[[PlanT], object] | None = None) -> None:
        self._plans: OrderedDict[bytes, PlanT] = OrderedDict()
        self._on_evict = on_evict

    def clear(self) -> None:
        """Drop every plan (releasing what ``on_evict`` releases)."""
        while self._plans:
            self._evict()

    def _evict(self) -> None:
        _, plan = self._plans.popitem(last=False)
        if self._on_evict is not None:
            self._on_evict(plan)

    def peek(self, key: bytes) -> PlanT | None:
        """The plan of ``key`` if cached (no LRU update: the steady path stays cheap)."""
        return self._plans.get(key)

    def get(self, key: bytes, build: Callable[[], PlanT]) -> PlanT:
        plan = self._plans.get(key)
        if plan is None:
            plan = build()
            self._plans[key] = plan
            while len(self._plans) > PLAN_CACHE_SIZE:
                self._evict()
        else:
            self._plans.move_to_end(key)
        return plan
