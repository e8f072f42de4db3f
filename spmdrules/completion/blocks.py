"""Repeated blocks: the completion pass visits one layer of a stack and replays it on the others.

A model built from identical layers (a decoder stack) has a translational symmetry: op ``k + P``
is op ``k`` (the same rule entry, attribute tail and schema) on the corresponding tensors one
layer on (same shapes and dtypes, same position in the op's operands and results, producers and
consumers ``P`` ops on). A *block* is one or more whole periods of consecutive ops; a *run* is
a sequence of blocks each of which is the one before, shifted.

The pass is deterministic, and visiting an op reads and writes only the state of the op's own
tensors, the op's remembered rule answers and the worklist flags of the ops around those tensors.
So when a sweep enters a block in the state (seen through the symmetry) in which it entered an
earlier block of the same run, visiting it would make the same changes, shifted; the pass writes
those changes instead of visiting the ops again. Nothing is assumed of the annotations or of how
far their effects reach: the entry states are compared in full, and a block whose entry differs
is visited as usual (and becomes the one later blocks are compared with).

Shared tensors. A tensor that every block reads at the same place, made before the run (a
decoder's attention mask, its rotary tables), has no image one layer on: it is the same tensor.
Its offers from the blocks' ops differ in their op, and its consumers reach the whole run, so it
is left out of the comparison of offers and of the ops around the block. It is safe to replay a
block that only *offers* to such a tensor, where each offer agrees with what the tensor already
has (or the tensor is closed or frozen). Then the visit never reads the tensor's other offers,
and it changes nothing of the tensor but its list of offers. So the block's entry state holds,
for each shared tensor, its attribute, rank, change count, frozen flag and refused offers, and
the offers made by the block's own ops (their op counted from the block). A replay then makes
those offers again, shifted. A visit that goes further with a shared tensor (it chooses among the
tensor's offers, changes it or refuses one of its offers) is not recorded, and the sweep watches
for it (``Sweeps.offer``, ``State.touched_shared``).

The static part (``repeats.find_blocks``) runs once per topology, with the completion index;
the dynamic part (``entry_head``, ``open_visit``, ``close``, ``replay``: one ``Visit`` a block) lives
in one sweep (``sweeps.Sweeps.sweep_blocks``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, NamedTuple, TypeVar

from spmdrules.completion.offers import RawOffer, Refusal, put_offer
from spmdrules.completion.state import State
from spmdrules.core.attr import DistAttr
from spmdrules.graph.annotation import Annotation

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Block:
    """Ops ``[start, stop)``: one or more whole periods of a run of repeated blocks."""

    run: int
    start: int
    stop: int
    #: the tensors the block's ops touch, in order of first use (the symmetry's coordinates)
    tensors: tuple[int, ...]
    #: the ops whose worklist flags or remembered answers the block's visits read or write
    lo: int
    hi: int
    gather: Callable[[Sequence[Any]], tuple[Any, ...]]
    #: the block's own tensors (those not shared), as ranges of tensor ids ``[a, b)`` in
    #: order (``take``): a layer's tensors are a few ranges, so the state of all of them is
    #: read and written a slice at a time
    pieces: tuple[tuple[int, int], ...]
    #: the tensors that every block of the run reads (made before the run: a mask, a rotary
    #: table), which a visit that is recorded may only make offers to (see ``close``)
    shared: tuple[int, ...]
    shared_gather: Callable[[Sequence[Any]], tuple[Any, ...]]

    @property
    def own(self) -> tuple[int, ...]:
        """The block's own tensors, in the order of ``pieces``."""
        return tuple(i for a, z in self.pieces for i in range(a, z))


def take(seq: list[T], pieces: tuple[tuple[int, int], ...]) -> list[T]:
    """The entries of ``seq`` in the ranges ``pieces``, in order."""
    (a, b), *rest = pieces
    out = seq[a:b]
    for a, b in rest:
        out += seq[a:b]
    return out


def gatherer(idx: tuple[int, ...]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """The entries ``idx`` of a sequence, as a tuple."""
    if not idx:
        return lambda seq: ()
    if len(idx) == 1:
        only = idx[0]
        return lambda seq: (seq[only],)
    return itemgetter(*idx)


# ---- one sweep ------------------------------------------------------------------------------
# The state the pass keeps per tensor and per op is ``state.State``. Its offers hold no
# absolute index (the op is counted from the tensor's base op), so the offers of corresponding
# tensors of two blocks compare and copy as they are. A list of offers is never changed once
# made (``offers.put_offer``), so a recorded state holds the lists themselves.

Flags = tuple[bytearray, bytearray, bytearray]  # this sweep's, the next forward, the next reverse


def _flag_window(flags: Flags, b: Block) -> tuple[bytes, bytes, bytes]:
    """The worklist flags of the ops around block ``b``."""
    lo, hi = b.lo, b.hi
    return bytes(flags[0][lo:hi]), bytes(flags[1][lo:hi]), bytes(flags[2][lo:hi])


@dataclass(slots=True)
class Visit:
    """A block visited in this sweep: the state it was entered in, and what the visit changed."""

    block: Block
    head: EntryHead
    offers: list[RawOffer | list[RawOffer] | None]  # the entry offers of the own tensors
    #: the own tensors' values at the end, per array (attr, rank, offers, changes, frozen,
    #: refusals, specs), None for an array the visit left as it was
    state: tuple[list[Any] | None, ...] = ()
    flags: tuple[bytes, bytes, bytes] = (b"", b"", b"")
    natural: list[tuple[DistAttr, ...] | None] | None = None
    needs: list[tuple[DistAttr, ...] | None] | None = None
    #: per shared tensor, the block's offers to it at the end (op counted from the block)
    shared_offers: tuple[tuple[RawOffer, ...], ...] = ()


def _block_offers(st: State, i: int, b: Block, base: Sequence[int]) -> tuple[RawOffer, ...]:
    """The offers that the ops of block ``b`` made to the shared tensor ``i``, their op counted
    from the block's start (so that they read the same in every block of the run).

    A shared tensor holds an offer from every block, and a tensor's offers are never changed
    once made (``put_offer``), so the answer is kept with the offers it was read from
    (``State.shared_at``) until the tensor gets a new one."""
    held = st.offers[i]
    key = (b.start, i)
    hit = st.shared_at.get(key)
    if hit is not None and hit[0] is held:
        mine: tuple[RawOffer, ...] = hit[1]
        return mine
    d, n = base[i] - b.start, b.stop - b.start
    every = () if held is None else held if isinstance(held, list) else (held,)
    mine = tuple([RawOffer(o.attr, o.rank, o.op + d, o.kind, o.driver) for o in every
                  if 0 <= o.op + d < n])
    st.shared_at[key] = (held, mine)
    return mine


def _shared_state(st: State, b: Block, base: Sequence[int]) -> tuple[Any, ...]:
    """The shared tensors as the block's visit reads them: their attributes and what decides
    whether an offer changes them, and the block's own offers to them (the other blocks' offers
    are never read: a recorded visit never chooses among a shared tensor's offers)."""
    if not b.shared:
        return ()
    g = b.shared_gather
    return (g(st.attr), g(st.rank), g(st.changes), g(st.frozen), g(st.rejected),
            tuple([_block_offers(st, i, b, base) for i in b.shared]))


class EntryHead(NamedTuple):
    """The state a block is entered in, but its own tensors' offers (compared first)."""

    # the own tensors' attrs, ranks, change counts, frozen flags and annotations
    attr: list[DistAttr | None]
    rank: list[int]
    changes: list[int]
    frozen: list[bool]
    ann: list[Annotation | None]
    rejected: list[tuple[Refusal, ...] | None] | None  # None: no refusal in the run yet
    shared: tuple[Any, ...]  # the shared tensors' state (``_shared_state``)
    # the rule answers, needs and worklist flags of the ops around the block
    natural: list[tuple[DistAttr, ...] | None]
    needs: list[tuple[DistAttr, ...] | None]
    flags: tuple[bytes, bytes, bytes]


def entry_head(st: State, ann: list[Annotation | None], b: Block, flags: Flags,
               base: Sequence[int]) -> EntryHead:
    """The entry state of block ``b`` except its own tensors' offers. ``ann`` holds one object
    per distinct annotation (equal annotations: the same object)."""
    p = b.pieces
    lo, hi = b.lo, b.hi
    return EntryHead(take(st.attr, p), take(st.rank, p), take(st.changes, p), take(st.frozen, p),
                     take(ann, p), take(st.rejected, p) if st.any_rejected else None,
                     _shared_state(st, b, base), st.natural[lo:hi], st.needs[lo:hi],
                     _flag_window(flags, b))


def matches(st: State, b: Block, v: Visit) -> bool:
    """Block ``b``'s own tensors' offers are the ones ``v``'s block was entered with."""
    return v.offers == take(st.offers, b.pieces)


def open_visit(st: State, b: Block, head: EntryHead) -> Visit:
    """Start recording the visit of block ``b``, entered in state ``head``."""
    return Visit(b, head, take(st.offers, b.pieces))


def close(st: State, v: Visit, flags: Flags, base: Sequence[int]) -> None:
    """Record the state the visit of ``v.block`` left: per array (attr with its spec, rank,
    offers, change count, frozen, refusals) the own tensors' values, where the visit changed
    any. The caller has checked that the visit left the shared tensors as they were, but for
    the block's offers to them."""
    b = v.block
    p = b.pieces
    head = v.head
    arrays = []
    pairs: tuple[tuple[list[Any], list[Any]], ...] = (
        (st.attr, head.attr), (st.rank, head.rank), (st.offers, v.offers),
        (st.changes, head.changes), (st.frozen, head.frozen))
    for now, entry in pairs:
        left = take(now, p)
        arrays.append(None if left == entry else left)
    refused = take(st.rejected, p) if st.any_rejected else None
    arrays.append(None if refused == head.rejected else refused)
    # a tensor's spec is a cache of its attr: it goes with the attr
    v.state = (*arrays, None if arrays[0] is None else take(st.spec, p))
    v.flags = _flag_window(flags, b)
    v.natural, v.needs = st.natural[b.lo:b.hi], st.needs[b.lo:b.hi]
    v.shared_offers = tuple(_block_offers(st, i, b, base) for i in b.shared)


def replay(st: State, b: Block, v: Visit, flags: Flags, base: Sequence[int]) -> None:
    """Make on block ``b`` the changes the visit ``v`` made on its block, through the symmetry.

    Each array the visit changed gets, for every own tensor, the value ``v``'s block was left
    with: the tensors the visit did not change have it already, since ``b`` was entered in the
    state ``v``'s block was."""
    arrays: tuple[list[Any], ...] = (st.attr, st.rank, st.offers, st.changes, st.frozen,
                                     st.rejected, st.spec)
    for now, left in zip(arrays, v.state, strict=True):
        if left is None:
            continue
        x = 0
        for a, z in b.pieces:
            y = x + z - a
            now[a:z] = left[x:y]
            x = y
    lo, hi = b.lo, b.hi
    flags[0][lo:hi], flags[1][lo:hi], flags[2][lo:hi] = v.flags
    assert v.natural is not None and v.needs is not None
    st.natural[lo:hi] = v.natural
    st.needs[lo:hi] = v.needs
    # the block's offers to the shared tensors, made in the order the visit made them (an
    # offer replaces the same op's earlier one in its place: ``put_offer``)
    for i, made in zip(b.shared, v.shared_offers, strict=True):
        d = b.start - base[i]
        for o in made:
            put_offer(st.offers, i, RawOffer(o.attr, o.rank, o.op + d, o.kind, o.driver))
