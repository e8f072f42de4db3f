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

The static part (``repeats.find_blocks``) runs once per topology, with the completion index;
the dynamic part (``entry_head``, ``open_visit``, ``close``, ``replay``: one ``Visit`` a block) lives
in one sweep (``completion._Run.sweep_blocks``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any


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


def gatherer(idx: tuple[int, ...]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """The entries ``idx`` of a sequence, as a tuple."""
    if len(idx) == 1:
        only = idx[0]
        return lambda seq: (seq[only],)
    return itemgetter(*idx)


# ---- one sweep ------------------------------------------------------------------------------
# The state the pass keeps per tensor and per op is ``completion._State``. Its offers hold no
# absolute index (the op is counted from the tensor's base op), so the offers of corresponding
# tensors of two blocks compare and copy as they are. Lists of offers are updated in place by
# the pass: a recorded state holds copies.

Flags = tuple[bytearray, bytearray, bytearray]  # this sweep's, the next forward, the next reverse


def _own(held: Any) -> Any:
    """One tensor's offers, as a list of its own if they are a list (the pass appends to it)."""
    return list(held) if type(held) is list else held


def _flag_window(flags: Flags, b: Block) -> tuple[bytes, bytes, bytes]:
    """The worklist flags of the ops around block ``b``."""
    lo, hi = b.lo, b.hi
    return bytes(flags[0][lo:hi]), bytes(flags[1][lo:hi]), bytes(flags[2][lo:hi])


@dataclass(slots=True)
class Visit:
    """A block visited in this sweep: the state it was entered in, and what the visit changed."""

    block: Block
    head: tuple[Any, ...]  # the entry state without the offers (cheap to compare first)
    offers: tuple[Any, ...]  # the entry offers
    changed: tuple[tuple[Any, ...], ...] = ()
    flags: tuple[bytes, bytes, bytes] = (b"", b"", b"")
    natural: list[Any] | None = None
    needs: list[Any] | None = None


def _rejected(st: Any, b: Block) -> tuple[Any, ...] | None:
    """The refused offers of the block's tensors, frozen (None: there are none anywhere)."""
    rejected = st.rejected
    if not rejected:
        return None
    return tuple(None if (r := rejected.get(i)) is None else tuple(r) for i in b.tensors)


def entry_head(st: Any, ann: Sequence[Any], b: Block, flags: Flags) -> tuple[Any, ...]:
    """The entry state of block ``b`` except the offers: (attrs, ranks, change counts, frozen
    flags, annotations, refused offers, rule answers of the ops around it, their needs, their
    worklist flags). ``ann`` holds one object per distinct annotation (equal annotations: the
    same object)."""
    g = b.gather
    lo, hi = b.lo, b.hi
    return (g(st.attr), g(st.rank), g(st.changes), g(st.frozen), g(ann), _rejected(st, b),
            st.natural[lo:hi], st.needs[lo:hi], _flag_window(flags, b))


def matches(st: Any, b: Block, v: Visit) -> bool:
    """Block ``b``'s offers are the ones ``v``'s block was entered with."""
    return v.offers == b.gather(st.offers)


def open_visit(st: Any, b: Block, head: tuple[Any, ...]) -> Visit:
    """Start recording the visit of block ``b``, entered in state ``head``."""
    return Visit(b, head, tuple(_own(h) for h in b.gather(st.offers)))


def close(st: Any, v: Visit, flags: Flags) -> None:
    """Record what the visit of ``v.block`` changed."""
    b = v.block
    g = b.gather
    attr, rank, changes, frozen = g(st.attr), g(st.rank), g(st.changes), g(st.frozen)
    offers, spec = g(st.offers), g(st.spec)
    a0, r0, c0, f0, _, e0 = v.head[:6]  # see entry_head
    rej = _rejected(st, b)
    none = (None,) * len(b.tensors)
    if e0 is None:
        e0 = none
    if rej is None:
        rej = none
    o0 = v.offers
    v.changed = tuple(
        (j, attr[j], rank[j], spec[j], _own(offers[j]), changes[j], frozen[j], rej[j])
        for j in range(len(b.tensors))
        if attr[j] is not a0[j] or rank[j] != r0[j] or offers[j] != o0[j]
        or changes[j] != c0[j] or frozen[j] != f0[j] or rej[j] != e0[j]
    )
    v.flags = _flag_window(flags, b)
    v.natural, v.needs = st.natural[b.lo:b.hi], st.needs[b.lo:b.hi]


def replay(st: Any, b: Block, v: Visit, flags: Flags) -> None:
    """Make on block ``b`` the changes the visit ``v`` made on its block, through the symmetry."""
    tensors = b.tensors
    attrs, ranks, specs, offers = st.attr, st.rank, st.spec, st.offers
    changes, frozen, rejected = st.changes, st.frozen, st.rejected
    for j, a, rank, spec, held, n, fr, rej in v.changed:
        i = tensors[j]
        attrs[i] = a
        ranks[i] = rank
        specs[i] = spec
        offers[i] = _own(held)
        changes[i] = n
        frozen[i] = fr
        if rej is not None:
            rejected[i] = list(rej)
    lo, hi = b.lo, b.hi
    flags[0][lo:hi], flags[1][lo:hi], flags[2][lo:hi] = v.flags
    assert v.natural is not None and v.needs is not None
    st.natural[lo:hi] = v.natural
    st.needs[lo:hi] = v.needs
