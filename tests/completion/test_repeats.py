"""The search for repeated blocks (``spmdrules.completion.repeats``): every block it finds is the
one before it shifted, by the definition checked the plain way; it finds the blocks a plain op-by-op
search finds; a run of short periods is grouped, and a group is a block only when it too is the one
before shifted; replaying grouped blocks changes nothing, wherever the annotations are."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from random_dags import random_dag
from replay_checks import same_without_replay

import spmdrules as sr
from spmdrules import examples, ops
from spmdrules.completion import index, repeats
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
SMALL: dict[str, Any] = {"batch": 4, "seq": 8, "hidden": 32, "heads": 4, "ffn": 64, "vocab": 128}


def _local(ix: index.Index, start: int, stop: int) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """The block's tensors in order of first use, and each op's operands, a separator and its
    results as positions in that order."""
    pos: dict[int, int] = {}
    rows = []
    for k in range(start, stop):
        rows.append(tuple(-1 if i < 0 else pos.setdefault(i, len(pos))
                          for i in (*ix.ins[k], -1, *ix.outs[k])))
    return tuple(pos), rows


def _near(ix: index.Index, start: int, stop: int, tensors: tuple[int, ...]) -> tuple[int, int]:
    """The ops around the block's own tensors (its shared ones reach the whole run)."""
    near = set(range(start, stop))
    for i in tensors:
        near.update(ix.consumers[i])
        if ix.producer[i] >= 0:
            near.add(ix.producer[i])
    return min(near), max(near) + 1


def _check_blocks(g: Graph) -> index.Index:
    """Every block of a run is the one before it shifted, op for op and tensor for tensor, by
    the definition (``completion_blocks``), checked the plain way."""
    ix = index.indices(g)
    dtypes = [t.dtype for t in g.tensors]
    for b in ix.blocks:
        tensors, _ = _local(ix, b.start, b.stop)
        assert b.tensors == tensors
        assert sorted(b.own) == sorted(i for i in tensors if i not in b.shared)
        assert [i for a, z in b.pieces for i in range(a, z)] == list(b.own)
        assert (b.lo, b.hi) == _near(ix, b.start, b.stop, b.own)
        assert all(ix.producer[i] < b.start for i in b.shared)
        assert ix.block_of[b.start:b.stop] == [ix.blocks.index(b)] * (b.stop - b.start)
    for a, b in zip(ix.blocks, ix.blocks[1:], strict=False):
        if a.run != b.run:
            continue
        shift = b.start - a.start
        assert a.stop == b.start and b.stop - b.start == shift
        assert _local(ix, a.start, a.stop)[1] == _local(ix, b.start, b.stop)[1]
        for k in range(a.start, a.stop):
            ca, cb = ix.calls[k], ix.calls[k + shift]
            if ca is None:  # an op visited through its Op: keyed by value
                assert cb is None and ix.odd[k] is not None and ix.odd[k] == ix.odd[k + shift]
            else:
                assert ca is cb
        assert a.shared == b.shared
        # replay writes block a's own tensors' state to block b's, coordinate for coordinate
        assert all(_moved(ix, i, j, shift) for i, j in zip(a.own, b.own, strict=True))
        for i, j in zip(a.tensors, b.tensors, strict=True):
            assert ix.shapes[i] == ix.shapes[j] and dtypes[i] == dtypes[j]
            assert _moved(ix, i, j, shift) if i not in a.shared else i == j
    return ix


def _chain(n: int, marks: dict[int, tuple[Any, ...]] | None = None) -> Callable[[], Graph]:
    """``n`` relu ops in a chain on an [8, 16] input, its tensors ``t0`` (the input) to ``tn``;
    ``marks`` annotates tensors by position (default: the input split over dp)."""
    def build() -> Graph:
        with Graph("chain") as g:
            t = g.input("t0", [8, 16])
            for k in range(n):
                t = ops.relu(t, name=f"t{k + 1}")
        for k, spec in (marks or {0: ("dp", None)}).items():
            shard(g.tensor(f"t{k}"), MESH, spec)
        return g

    return build


# how the search runs: signatures keyed op by op (a small graph) or by arrays, and the shift
# check over all ops at once or a few at a time
WAYS = pytest.mark.parametrize("small,chunk", [(repeats.SMALL, repeats.CHUNK), (0, repeats.CHUNK),
                                               (0, 7)], ids=["by-op", "arrays", "chunked"])


@WAYS
def test_a_long_chain_is_one_run_of_grouped_periods(small: int, chunk: int,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # a period of one op: the blocks hold GROUP_OPS periods each, and the sweeps replay them
    monkeypatch.setattr(repeats, "SMALL", small)
    monkeypatch.setattr(repeats, "CHUNK", chunk)
    n = 40 * repeats.GROUP_OPS
    r = same_without_replay(_chain(n))
    ix = _check_blocks(r.graph)
    assert {b.stop - b.start for b in ix.blocks} == {repeats.GROUP_OPS}
    assert len(ix.blocks) == n // repeats.GROUP_OPS - 1  # the last op's output has no consumer
    assert r.blocks_replayed >= len(ix.blocks) - 2 and r.rule_calls < n // 10


@pytest.mark.parametrize("extra", [1, 7, repeats.GROUP_OPS - 1])
def test_a_run_that_does_not_fill_its_last_group(extra: int) -> None:
    # the periods after the last whole group are no block: their ops are visited
    n = 20 * repeats.GROUP_OPS + extra
    r = same_without_replay(_chain(n))
    ix = _check_blocks(r.graph)
    last = ix.blocks[-1].stop
    assert {b.stop - b.start for b in ix.blocks} == {repeats.GROUP_OPS}
    assert 0 < n - last < 2 * repeats.GROUP_OPS and ix.block_of[last:] == [-1] * (n - last)


@pytest.mark.parametrize("where", [3, 320, 337, 639])
@pytest.mark.parametrize("spec", [(None, "mp"), ("mp", None), (None, None)])
def test_an_annotation_in_the_middle_of_a_run(where: int, spec: tuple[Any, ...]) -> None:
    # the topology knows no annotation: the group holding the annotated tensor is entered in
    # another state, is visited, and so are the groups its effect reaches
    r = same_without_replay(_chain(640, {0: ("dp", None), where: spec}))
    _check_blocks(r.graph)
    assert r.blocks_replayed > 0


def test_a_short_chain_keeps_blocks_of_one_period() -> None:
    # too few periods to group and keep GROUP_MIN_BLOCKS blocks
    r = same_without_replay(_chain(repeats.GROUP_MIN_BLOCKS + 3))
    ix = _check_blocks(r.graph)
    assert ix.blocks and {b.stop - b.start for b in ix.blocks} == {1}


def test_layers_of_a_few_ops_are_grouped_by_whole_layers() -> None:
    # a period of three ops (matmul, add, relu), each layer with its own weights
    def build() -> Graph:
        with Graph("layers") as g:
            h = g.input("x", [8, 16])
            for i in range(100):
                w = g.param(f"w{i}", [16, 16])
                b = g.param(f"b{i}", [8, 16])
                h = ops.relu(ops.add(ops.matmul(h, w), b))
            shard(g.tensor("x"), MESH, ("dp", None))
            shard(g.tensor("w50"), MESH, (None, "mp"))
        return g

    r = same_without_replay(build)
    ix = _check_blocks(r.graph)
    # as many layers as make GROUP_OPS ops, the run being long enough to keep enough blocks
    assert 99 // repeats.GROUP_MIN_BLOCKS >= repeats.GROUP_OPS // 3 > 1
    assert {b.stop - b.start for b in ix.blocks} == {3 * (repeats.GROUP_OPS // 3)}
    assert r.blocks_replayed > 0


def _reference_blocks(ix: index.Index, dtypes: list[str]) -> list[tuple[int, int, int]]:
    """(run, start, stop) of the blocks of one period, found the plain way, op by op: the
    period is the commonest distance between ops of one signature that maps the most ops; a run
    grows while the next period is the block before it, shifted."""
    def sig_of(k: int) -> Any:
        c = ix.calls[k]
        key = (*map(id, c[:5]), c[5]) if c is not None else ix.odd[k]
        if key is None:
            return None
        return (key, len(ix.ins[k]),
                tuple((ix.shapes[i], dtypes[i]) for i in (*ix.ins[k], *ix.outs[k])))

    ids: dict[Any, int] = {}
    sig = [-1 if (s := sig_of(k)) is None else ids.setdefault(s, len(ids))
           for k in range(len(ix.ins))]
    n = len(sig)
    last: dict[int, int] = {}
    gaps: Counter[int] = Counter()
    for k, s in enumerate(sig):
        if s >= 0:
            if s in last:
                gaps[k - last[s]] += 1
            last[s] = k
    period, best = 0, 0
    for p, _ in gaps.most_common(4):
        score = sum(1 for a, b in zip(sig, sig[p:], strict=False) if a == b and a >= 0)
        if score > best or (score == best and p < period):
            period, best = p, score
    if not period:
        return []

    def recurs(start: int) -> bool:  # ops [start, start + period) recur one period on
        if start + 2 * period > n or any(sig[k] < 0 or sig[k] != sig[k + period]
                                         for k in range(start, start + period)):
            return False
        (ta, la), (tb, lb) = (_local(ix, start, start + period),
                              _local(ix, start + period, start + 2 * period))
        # a tensor both blocks read at one place is shared, and must be made before them
        return la == lb and all(_moved(ix, i, j, period) or (i == j and ix.producer[i] < start)
                                for i, j in zip(ta, tb, strict=True))

    out: list[tuple[int, int, int]] = []
    runs, k = 0, 0
    while k < n:
        if not recurs(k):
            k += 1
            continue
        start = k
        while recurs(start):
            start += period
        # a tensor shared by some of the run's blocks only: the run is no run
        cols = list(zip(*(_local(ix, b, b + period)[0] for b in range(k, start + 1, period)),
                        strict=True))
        if all(len(set(c)) in (1, len(c)) for c in cols):
            out.extend((runs, b, b + period) for b in range(k, start + 1, period))
            runs += 1
        k = start + period
    return out


def _moved(ix: index.Index, i: int, j: int, shift: int) -> bool:
    """Tensor ``j``'s producer and consumers are tensor ``i``'s, ``shift`` ops on."""
    p, q = ix.producer[i], ix.producer[j]
    return ((p < 0 and q < 0) or (p >= 0 and q == p + shift)) and tuple(ix.consumers[j]) == tuple(
        c + shift for c in ix.consumers[i])


def _random_dag_graphs() -> list[Callable[[], Graph]]:
    return [lambda seed=seed, n=n: random_dag(seed, n) for seed in range(6) for n in (30, 300)]


def _swapped_operands(swap: Callable[[int], bool], layers: int = 12) -> Callable[[], Graph]:
    """Layers of a split, three adds and a matmul, whose second add takes the halves swapped in the
    layers ``swap`` picks: every op has its signature, every tensor its producer and consumers
    a layer on, and only which slots hold one tensor tells the layers apart."""
    def build() -> Graph:
        with Graph("swapped") as g:
            h = g.input("x", [8, 16])
            for i in range(layers):
                a, b = ops.split(h, sections=[8, 8], axis=1)
                c = ops.add(a, b)
                d = ops.add(b, a) if swap(i) else ops.add(a, b)
                h = ops.matmul(ops.add(c, d), g.param(f"w{i}", [8, 16]))
            shard(g.tensor("x"), MESH, ("dp", None))
        return g

    return build


@pytest.mark.parametrize("build", [
    _swapped_operands(lambda i: i % 2 == 1),
    _swapped_operands(lambda i: i in (5, 6)),
    lambda: examples.gpt_decoder(5, MESH, **SMALL),
    lambda: examples.llama_decoder(3, MESH),
    lambda: examples.mlp(MESH),
    _chain(50),
    *_random_dag_graphs(),
])
@WAYS
def test_the_blocks_found_are_the_plain_ones(build: Callable[[], Graph], small: int, chunk: int,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # the array search finds the blocks the plain op-by-op search finds (no grouping)
    monkeypatch.setattr(repeats, "GROUP_OPS", 0)
    monkeypatch.setattr(repeats, "SMALL", small)
    monkeypatch.setattr(repeats, "CHUNK", chunk)
    g = build()
    ix = _check_blocks(g)
    want = _reference_blocks(ix, [t.dtype for t in g.tensors])
    assert [(b.run, b.start, b.stop) for b in ix.blocks] == want


@pytest.mark.parametrize("every", [3, 4])
def test_groups_that_are_not_shifted_copies_are_not_made(every: int) -> None:
    # one layer in ``every`` takes its halves swapped: a block of one layer (aligned so the swap
    # hides) recurs, but a group of six layers does so only when six is a multiple of ``every``
    build = _swapped_operands(lambda i: i % every == 1, layers=60)
    r = same_without_replay(build)
    ix = _check_blocks(r.graph)
    period = 5  # split, three adds, matmul
    assert min(repeats.GROUP_OPS // period, 59 // repeats.GROUP_MIN_BLOCKS) == 6
    assert {b.stop - b.start for b in ix.blocks} == {6 * period if 6 % every == 0 else period}
    assert r.blocks_replayed > 0
