"""Finding the runs of repeated blocks of a topology (the static part of ``completion_blocks``).

Op ``k + P`` repeats op ``k`` one period on when it has op ``k``'s signature (the same rule entry,
attribute tail and schema; operands and results of the same shapes and dtypes) and its tensors
correspond to op ``k``'s: their producers and consumers are ``P`` ops on, and two of its slots hold
one tensor exactly where op ``k``'s do. A block of consecutive ops recurs one period on when each
of its ops does, and the tensor links stay inside the block alike (see ``_recurs``).

Everything is array work over the ops' flattened slots (operands then results, op by op), so a
topology of a million ops costs a few passes of numpy, not a Python loop per op: a chain of 200k
ops is one run of 200k periods. A run of short periods is grouped, ``G`` periods a block (as many
as make at most ``GROUP_OPS`` ops, the run keeping ``GROUP_MIN_BLOCKS`` blocks at least), so that
the sweeps compare and replay one block per group rather than one per period (on a chain, one
per op). A grouped run is checked again as such, each group the one before shifted, and one that
fails the check keeps its single-period blocks. The last periods of a run that do not fill a group
are no block (their ops are visited).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain
from operator import add
from typing import Final

import numpy as np
from numpy.typing import NDArray

from spmdrules.completion.blocks import Block, gatherer

Ints = NDArray[np.int64]
Bools = NDArray[np.bool_]

#: a run of short periods is grouped into blocks of as many whole periods as make at most this
#: many ops (a decoder layer of 22 ops stays one block) ...
GROUP_OPS: Final = 32
#: ... as long as the run keeps at least this many blocks
GROUP_MIN_BLOCKS: Final = 8
#: ops checked at once (bounds the arrays of the check)
CHUNK: Final = 1 << 13
#: up to this many ops, signatures are keyed op by op
SMALL: Final = 1 << 10


class _Slots:
    """Every op's tensors in one array: op ``k``'s operands, then its results, at
    ``tensor[start[k]:start[k + 1]]``; and the tensors' producers and consumers as arrays."""

    def __init__(self, ins: Sequence[tuple[int, ...]], outs: Sequence[tuple[int, ...]],
                 producer: Sequence[int], consumers: Sequence[Sequence[int]]) -> None:
        n = len(ins)
        self.n_in = np.fromiter(map(len, ins), np.int64, n)
        self.width = self.n_in + np.fromiter(map(len, outs), np.int64, n)
        self.start = _starts(self.width)
        self.size = size = int(self.start[-1])
        # the slots as a list too: the blocks' tensors are read from it, sharing its ints
        self.flat = list(chain.from_iterable(map(add, ins, outs)))
        self.tensor = np.fromiter(self.flat, np.int64, size)
        # how many slots back the same tensor was last used (size + 1: never before)
        order = np.argsort(self.tensor, kind="stable")
        again = np.flatnonzero(self.tensor[order[1:]] == self.tensor[order[:-1]])
        self.back = np.full(size, size + 1, np.int64)
        self.back[order[again + 1]] = order[again + 1] - order[again]
        self.producer = np.fromiter(producer, np.int64, len(producer))
        self.n_cons = np.fromiter(map(len, consumers), np.int64, len(consumers))
        self.cons_start = _starts(self.n_cons)
        self.consumer = np.fromiter(chain.from_iterable(consumers), np.int64,
                                    int(self.cons_start[-1]))


def _starts(counts: Ints) -> Ints:
    out = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def _dense(values: Ints) -> Ints:
    """Equal values, equal ids (0, 1, ...)."""
    return np.unique(values, return_inverse=True)[1].astype(np.int64).reshape(-1)


def _row_ids(rows: int, cols: Iterable[Ints]) -> Ints:
    """Dense ids of the ``rows`` rows of the non-negative columns ``cols`` (made one at a time):
    equal rows, equal ids."""
    key = np.zeros(rows, np.int64)
    span = 1
    for c in cols:
        r = int(c.max()) + 1
        if span * r >= 1 << 62:  # the mixed-radix key would overflow: renumber it first
            key = _dense(key)
            span = int(key.max()) + 1
        key = key * r + c
        span *= r
    return _dense(key)


def _signatures(sl: _Slots, code: Sequence[int], kind: Sequence[int]) -> Ints:
    """Each op's signature id: equal for two ops whose visits are the same up to which tensors
    they touch (the same ``code``: rule entries, attribute tails and schema; operands and
    results of the same ``kind``: shape and dtype). An op of code -1 has no signature (-1)."""
    n = len(code)
    sig = np.full(n, -1, np.int64)
    if not n:
        return sig
    if n <= SMALL:  # a few ops: one key per op costs less than numpy's calls
        flat, at, n_in = sl.flat, sl.start.tolist(), sl.n_in.tolist()
        keys: dict[tuple[int, ...], int] = {}
        for k, c in enumerate(code):
            if c >= 0:
                sig[k] = keys.setdefault(
                    (c, n_in[k], *[kind[i] for i in flat[at[k]:at[k + 1]]]), len(keys))
        return sig
    codes = np.fromiter(code, np.int64, n)
    kinds = np.fromiter(kind, np.int64, len(kind))
    known = codes >= 0
    offset = 0
    # the widths present (not np.unique: without its return options it imports numpy.ma, a
    # tenth of a first run's time)
    for w in np.flatnonzero(np.bincount(sl.width[known])).tolist():
        rows = np.flatnonzero(known & (sl.width == w))
        first = sl.start[rows]
        got = _row_ids(len(rows), chain((codes[rows], sl.n_in[rows]),
                                        (kinds[sl.tensor[first + j]] for j in range(w))))
        sig[rows] = got + offset
        offset += int(got.max()) + 1
    return sig


def _period(sig: Ints) -> int:
    """The shift that maps the most ops onto ops of their signature, among the four commonest
    distances between an op and the previous op of its signature (ties: the one met first), 0 if
    no signature repeats."""
    pos = np.flatnonzero(sig >= 0)
    order = np.argsort(sig[pos], kind="stable")
    at, s = pos[order], sig[pos][order]
    again = np.flatnonzero(s[1:] == s[:-1])
    if not len(again):
        return 0
    here = at[again + 1]
    gaps = (here - at[again])[np.argsort(here, kind="stable")]  # in the order the ops meet them
    values, first, counts = np.unique(gaps, return_index=True, return_counts=True)
    best, best_score = 0, 0
    for p in values[np.lexsort((first, -counts))[:4]].tolist():
        a = sig[:-p]
        score = int(np.count_nonzero((a >= 0) & (a == sig[p:])))
        if score > best_score or (score == best_score and p < best):
            best, best_score = p, score
    return best


def _recurs(sl: _Slots, sig: Ints, shift: int, lo: int, hi: int) -> tuple[Bools, Ints]:
    """``_recurs_at`` a chunk of ops at a time: its arrays are a dozen per slot."""
    if hi - lo <= CHUNK:
        return _recurs_at(sl, sig, shift, lo, hi)
    parts = [_recurs_at(sl, sig, shift, a, min(a + CHUNK, hi)) for a in range(lo, hi, CHUNK)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _recurs_at(sl: _Slots, sig: Ints, shift: int, lo: int, hi: int) -> tuple[Bools, Ints]:
    """For the ops ``k`` of ``[lo, hi)`` (``hi + shift <= n``): whether op ``k + shift`` repeats op
    ``k``, and the slot a block holding op ``k`` must start after for the tensor links to stay
    alike: the two blocks hold one tensor in two slots at the same places exactly when each slot
    and its image link back to the last use of their tensor equally far, or both further back
    than the block's start."""
    same = (sig[lo:hi] >= 0) & (sig[lo:hi] == sig[lo + shift:hi + shift])
    a, b = int(sl.start[lo]), int(sl.start[hi])
    width = sl.width[lo:hi]
    s = np.arange(a, b)
    # each slot's image: the same place in op k + shift (only read where the signatures agree)
    image = np.minimum(s + np.repeat(sl.start[lo + shift:hi + shift] - sl.start[lo:hi], width),
                       sl.size - 1)
    x, y = sl.tensor[a:b], sl.tensor[image]
    # one tensor at the same place in both ops: shared by the blocks (a mask every layer reads),
    # made before them; its producer and consumers stay where they are
    shared = x == y
    px, py = sl.producer[x], sl.producer[y]
    bad = np.where(px < 0, py >= 0, py != px + shift) & ~shared
    cx = sl.n_cons[x]
    bad |= cx != sl.n_cons[y]
    # every consumer one shift on, entry by entry
    pick = np.flatnonzero(~bad & (cx > 0) & ~shared)
    if len(pick):
        reps = cx[pick]
        off = np.arange(int(reps.sum())) - np.repeat(np.cumsum(reps) - reps, reps)
        cons_x = sl.consumer[np.repeat(sl.cons_start[x[pick]], reps) + off]
        cons_y = sl.consumer[np.repeat(sl.cons_start[y[pick]], reps) + off]
        bad[np.repeat(pick, reps)[cons_y != cons_x + shift]] = True
    d1, d2 = sl.back[a:b], sl.back[image]
    late = s - np.where(d1 != d2, np.minimum(d1, d2), sl.size + 1)
    made = shared & (px >= 0)  # a shared tensor: the block starts after its producer
    late[made] = np.maximum(late[made], sl.start[px[made]])
    reach = np.full(hi - lo, -1, np.int64)
    used = np.flatnonzero(width > 0)
    if len(used):
        at = sl.start[lo:hi][used] - a
        same[used] &= ~np.logical_or.reduceat(bad, at)
        reach[used] = np.maximum.reduceat(late, at)
    return same, reach


def _window_max(a: Ints, w: int) -> Ints:
    """``max(a[b:b + w])`` for every ``b`` with a full window."""
    m, span = a, 1
    while 2 * span <= w:
        m = np.maximum(m[:-span], m[span:])  # max over [i, i + 2 * span)
        span *= 2
    count = len(a) - w + 1
    return np.maximum(m[:count], m[w - span:w - span + count])


def _pairs(sl: _Slots, sig: Ints, period: int) -> bytes:
    """Byte ``b`` is 1 where the block of ops ``[b, b + period)`` recurs one period on."""
    n = len(sig)
    out = np.zeros(n, np.uint8)
    count = n - 2 * period + 1  # the blocks with a whole period after them
    if count > 0:
        good, reach = _recurs(sl, sig, period, 0, n - period)
        done = _starts(good.astype(np.int64))
        whole = done[period:period + count] - done[:count] == period
        out[:count] = whole & (_window_max(reach, period) < sl.start[:count])
    return out.tobytes()


def _grouped(sl: _Slots, sig: Ints, k: int, period: int, periods: int) -> int:
    """How many periods a block of the run of ``periods`` periods from op ``k`` holds: ``G`` if
    the run's blocks of ``G`` periods recur each on the next, else 1."""
    group = max(1, min(GROUP_OPS // period, periods // GROUP_MIN_BLOCKS))
    if group == 1:
        return 1
    length, count = group * period, periods // group
    good, reach = _recurs(sl, sig, length, k, k + (count - 1) * length)
    starts = sl.start[k:k + (count - 1) * length:length]
    ok = (good.reshape(count - 1, length).all(axis=1)
          & (reach.reshape(count - 1, length).max(axis=1) < starts))
    return group if bool(ok.all()) else 1


def _run_blocks(sl: _Slots, run: int, k: int, length: int, count: int,
                producer: Sequence[int], consumers: Sequence[Sequence[int]]) -> list[Block]:
    """The ``count`` blocks of ``length`` ops from op ``k``, each the one before shifted: the
    tensors of each in order of first use (the same slots as the first's), which of them every
    block shares (made before the run, read by each block), and the ops around the block's own
    tensors (the first's, shifted). None if some tensor is shared by some blocks only."""
    a = int(sl.start[k])
    w = int(sl.start[k + length]) - a
    firsts = np.flatnonzero(sl.back[a:a + w] > np.arange(w))  # a tensor's first use in the block
    starts = sl.start[k:k + count * length:length]
    held = sl.tensor[starts[:, None] + firsts[None, :]]  # each block's tensors, a row each
    rows = [tuple(row) for row in held.tolist()]
    # a tensor at one place in every block is shared; one shared by some blocks only has no
    # symmetry to follow, and the run is no run
    same = held[1:] == held[:-1]
    everywhere = same.all(axis=0)
    if (same.any(axis=0) & ~everywhere).any():
        return []
    mine = set(np.flatnonzero(everywhere).tolist())
    near_lo, near_hi = k, k + length - 1
    for j, i in enumerate(rows[0]):
        if j in mine:
            continue  # its consumers reach the whole run: a visit may not change it (``blocks``)
        p = producer[i]
        c = consumers[i]
        if p >= 0:
            near_lo, near_hi = min(near_lo, p), max(near_hi, p)
        if c:
            near_lo, near_hi = min(near_lo, c[0]), max(near_hi, c[-1])
    pieces = _own_pieces(held[:, ~everywhere])
    shared = [tuple(row) for row in held[:, everywhere].tolist()]
    out = []
    for j, tensors in enumerate(rows):
        d = j * length
        out.append(Block(run, k + d, k + d + length, tensors, near_lo + d, near_hi + 1 + d,
                         gatherer(tensors), pieces[j], shared[j], gatherer(shared[j])))
    return out


def _own_pieces(held: Ints) -> list[tuple[tuple[int, int], ...]]:
    """Each block's own tensors (a row of ``held``, one column per coordinate) as ranges of
    consecutive tensor ids, in one order of the coordinates for all. Sorted by the first
    block's ids when that one order sorts every block's and cuts them into ranges alike (a
    layer's parameters, its results: a few ranges), else one tensor a range."""
    order = np.argsort(held[0], kind="stable")
    ids = held[:, order]
    steps = np.diff(ids, axis=1)
    cuts = steps != 1
    if (steps > 0).all() and (cuts == cuts[0]).all():
        ends = np.flatnonzero(np.append(cuts[0], True)) + 1
        begins = np.append(0, ends[:-1])
    else:  # no common order: one range per tensor, in coordinate order
        ids = held
        begins = np.arange(held.shape[1])
        ends = begins + 1
    firsts, lasts = ids[:, begins].tolist(), (ids[:, ends - 1] + 1).tolist()
    return [tuple(zip(f, z, strict=True)) for f, z in zip(firsts, lasts, strict=True)]


def find_blocks(
    ins: Sequence[tuple[int, ...]],
    outs: Sequence[tuple[int, ...]],
    producer: Sequence[int],
    consumers: Sequence[Sequence[int]],
    code: Sequence[int],
    kind: Sequence[int],
) -> tuple[list[int], tuple[Block, ...]]:
    """The runs of repeated blocks of one topology: each op's block (-1: none) and the blocks.

    ``consumers[i]`` lists tensor ``i``'s consumers in ascending order, each once; ``code[k]``
    is op ``k``'s signature code (-1: none) and ``kind[i]`` tensor ``i``'s kind (``Index``)."""
    n = len(ins)
    block_of = [-1] * n
    sl = _Slots(ins, outs, producer, consumers)
    sig = _signatures(sl, code, kind)
    period = _period(sig)
    if period <= 0:
        return block_of, ()
    pairs = _pairs(sl, sig, period)
    blocks: list[Block] = []
    runs = 0
    k = pairs.find(1)
    while k >= 0:
        last = k  # a run: each block recurs one period on, up to the last
        while pairs[last]:
            last += period
        periods = (last - k) // period + 1
        group = _grouped(sl, sig, k, period, periods)
        length = group * period
        for b in _run_blocks(sl, runs, k, length, periods // group, producer, consumers):
            block_of[b.start:b.stop] = [len(blocks)] * length
            blocks.append(b)
        runs += 1
        k = pairs.find(1, last + period)
    return block_of, tuple(blocks)
