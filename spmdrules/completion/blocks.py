"""Repeated blocks: the completion pass visits one layer of a stack and replays it on the others.

A model built from identical layers (a decoder stack) has a translational symmetry: op ``k + P``
is op ``k`` (the same rule entry, attribute tail and schema) on the corresponding tensors one
layer on (same shapes and dtypes, same position in the op's operands and results, producers and
consumers ``P`` ops on). A *block* is ``P`` consecutive ops; a *run* is a sequence of blocks
each of which is the one before, shifted.

The pass is deterministic, and visiting an op reads and writes only the state of the op's own
tensors, the op's remembered rule answers and the worklist flags of the ops around those tensors.
So when a sweep enters a block in the state (seen through the symmetry) in which it entered an
earlier block of the same run, visiting it would make the same changes, shifted; the pass writes
those changes instead of visiting the ops again. Nothing is assumed of the annotations or of how
far their effects reach: the entry states are compared in full, and a block whose entry differs
is visited as usual (and becomes the one later blocks are compared with).

The static part (``find_blocks``) runs once per topology, with the completion index; the
dynamic part (``entry_head``, ``open_visit``, ``close``, ``replay``: one ``Visit`` a block) lives
in one sweep (``completion._Run.sweep_blocks``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

#: a run needs at least this many blocks (two: one visited, one replayed)
MIN_BLOCKS = 2


@dataclass(frozen=True, slots=True)
class Block:
    """Ops ``[start, stop)``, one period of a run of repeated blocks."""

    run: int
    start: int
    stop: int
    #: the tensors the block's ops touch, in order of first use (the symmetry's coordinates)
    tensors: tuple[int, ...]
    #: the ops whose worklist flags or remembered answers the block's visits read or write
    lo: int
    hi: int
    gather: Callable[[Sequence[Any]], tuple[Any, ...]]


def _gatherer(idx: tuple[int, ...]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    if len(idx) == 1:
        only = idx[0]
        return lambda seq: (seq[only],)
    return itemgetter(*idx)


def _signature(call: tuple[Any, ...] | None, ins: tuple[int, ...], outs: tuple[int, ...],
               shapes: Sequence[tuple[int, ...]], dtypes: Sequence[str]) -> object | None:
    """What makes two ops' visits the same, up to which tensors they touch (None: the op is
    visited through its ``Op`` object, which the symmetry does not describe)."""
    if call is None:
        return None
    return (id(call[0]), id(call[1]), id(call[2]), id(call[3]), id(call[4]), call[5],
            tuple(id(shapes[i]) for i in ins), tuple(id(shapes[i]) for i in outs),
            tuple(dtypes[i] for i in ins), tuple(dtypes[i] for i in outs))


def _period(sig: Sequence[int]) -> int:
    """The shift that maps the most ops onto ops of their signature, among the commonest
    distances between an op and the previous op of its signature (0: none)."""
    last: dict[int, int] = {}
    gaps: Counter[int] = Counter()
    for k, s in enumerate(sig):
        if s >= 0:
            p = last.get(s)
            if p is not None:
                gaps[k - p] += 1
            last[s] = k
    best, best_score = 0, 0
    for p, _ in gaps.most_common(4):
        score = sum(1 for a, b in zip(sig, sig[p:], strict=False) if a == b and a >= 0)
        if score > best_score or (score == best_score and p < best):
            best, best_score = p, score
    return best


def _local(start: int, stop: int, ins: Sequence[tuple[int, ...]],
           outs: Sequence[tuple[int, ...]]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """The block's tensors in order of first use, and each op's operands and results as
    positions in that order."""
    pos: dict[int, int] = {}
    shape: list[tuple[int, ...]] = []
    for k in range(start, stop):
        row = []
        for i in (*ins[k], -1, *outs[k]):
            if i < 0:
                row.append(-1)
                continue
            j = pos.get(i)
            if j is None:
                j = pos[i] = len(pos)
            row.append(j)
        shape.append(tuple(row))
    return tuple(pos), shape


def find_blocks(
    ins: Sequence[tuple[int, ...]],
    outs: Sequence[tuple[int, ...]],
    producer: Sequence[int],
    consumers: Sequence[tuple[int, ...]],
    calls: Sequence[tuple[Any, ...] | None],
    shapes: Sequence[tuple[int, ...]],
    dtypes: Sequence[str],
) -> tuple[list[int], tuple[Block, ...]]:
    """The runs of repeated blocks of one topology: each op's block (-1: none) and the blocks."""
    n = len(ins)
    block_of = [-1] * n
    ids: dict[object, int] = {}
    sig = []
    for k in range(n):
        s = _signature(calls[k], ins[k], outs[k], shapes, dtypes)
        sig.append(-1 if s is None else ids.setdefault(s, len(ids)))
    period = _period(sig)
    if period <= 0:
        return block_of, ()
    # same[k]: op k + period has op k's signature; a block can repeat where a whole period does
    same = [sig[k] >= 0 and k + period < n and sig[k] == sig[k + period] for k in range(n)]
    prefix = [0]
    for flag in same:
        prefix.append(prefix[-1] + flag)

    def repeats(start: int) -> bool:  # ops [start, start + period) recur one period on
        return start + 2 * period <= n and prefix[start + period] - prefix[start] == period

    blocks: list[Block] = []
    runs = 0
    k = 0
    while k < n:
        if not repeats(k):
            k += 1
            continue
        run: list[Block] = []
        prev: tuple[tuple[int, ...], list[tuple[int, ...]], int, int] | None = None
        start = k
        while start + period <= n:
            tensors, local = _local(start, start + period, ins, outs)
            near = set(range(start, start + period))
            for i in tensors:
                near.update(consumers[i])
                if producer[i] >= 0:
                    near.add(producer[i])
            lo, hi = min(near), max(near) + 1
            if prev is not None and not _shifted(prev, (tensors, local, lo, hi), period,
                                                 producer, consumers, shapes, dtypes):
                break
            run.append(Block(runs, start, start + period, tensors, lo, hi, _gatherer(tensors)))
            prev = (tensors, local, lo, hi)
            if not repeats(start):
                break
            start += period
        if len(run) >= MIN_BLOCKS:
            for b in run:
                for j in range(b.start, b.stop):
                    block_of[j] = len(blocks)
                blocks.append(b)
            runs += 1
            k = run[-1].stop
        else:
            k += 1
    return block_of, tuple(blocks)


def _shifted(
    a: tuple[tuple[int, ...], list[tuple[int, ...]], int, int],
    b: tuple[tuple[int, ...], list[tuple[int, ...]], int, int],
    period: int,
    producer: Sequence[int],
    consumers: Sequence[tuple[int, ...]],
    shapes: Sequence[tuple[int, ...]],
    dtypes: Sequence[str],
) -> bool:
    """Block ``b`` is block ``a`` one period on: the same local structure, tensors of the same
    shapes and dtypes, and producers and consumers one period on."""
    ta, la, lo_a, hi_a = a
    tb, lb, lo_b, hi_b = b
    if la != lb or len(ta) != len(tb) or (lo_b, hi_b) != (lo_a + period, hi_a + period):
        return False
    for i, j in zip(ta, tb, strict=True):
        if shapes[i] != shapes[j] or dtypes[i] != dtypes[j]:
            return False
        p, q = producer[i], producer[j]
        if (p < 0) != (q < 0) or (p >= 0 and q != p + period):
            return False
        if consumers[j] != tuple(c + period for c in consumers[i]):
            return False
    return True


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
