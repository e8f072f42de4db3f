"""A graph folded by its repeated blocks: one representative of each run, weighted.

``spmdrules.completion.repeats.find_blocks`` finds the runs of repeated blocks (a decoder
stack's layers). Every op of a later block of a run stands for the op at the same place in the
run's first block, and so does every parameter that only that block reads; the solver chooses
one strategy per representative, counted as many times as it stands for, and every block takes
its choice. So a 32-layer stack costs the solver about what one layer does.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from spmdrules.completion.repeats import find_blocks
from spmdrules.graph.graph import Graph


@dataclass(frozen=True, slots=True)
class Quotient:
    """``rep[k]``: the op that op ``k`` (in ``Graph.ops`` order) stands for (itself if not in a
    later block); ``rep_tensor[i]``: likewise for tensor ``i`` (``Tensor.order``); ``weight``:
    how many ops (tensors) each representative stands for; ``blocks``: the runs' block count."""

    rep: tuple[int, ...]
    rep_tensor: tuple[int, ...]
    weight: Counter[int]
    tensor_weight: Counter[int]
    blocks: int


def fold(g: Graph) -> Quotient:
    ins = [tuple(t.order for t in op.inputs) for op in g.ops]
    outs = [tuple(t.order for t in op.outputs) for op in g.ops]
    producer, consumers = _links(len(g.tensors), ins, outs)
    codes: dict[Any, int] = {}
    code = [codes.setdefault((op.type, repr(op.attrs), repr(op.extra)), len(codes))
            for op in g.ops]
    kinds: dict[tuple[tuple[int, ...], str], int] = {}
    kind = [kinds.setdefault((t.shape, t.dtype), len(kinds)) for t in g.tensors]
    _, blocks = find_blocks(ins, outs, producer, consumers, code, kind)
    rep = list(range(len(g.ops)))
    first: dict[int, int] = {}
    for b in blocks:
        start = first.setdefault(b.run, b.start)
        for k in range(b.start, b.stop):
            rep[k] = start + (k - b.start)
    rep_t = _tensor_representatives(rep, ins, outs, producer, consumers)
    return Quotient(tuple(rep), tuple(rep_t), Counter(rep), Counter(rep_t), len(blocks))


def _links(n: int, ins: list[tuple[int, ...]], outs: list[tuple[int, ...]]
           ) -> tuple[list[int], list[list[int]]]:
    """Each tensor's producing op (-1: a source) and consuming ops."""
    producer = [-1] * n
    consumers: list[list[int]] = [[] for _ in range(n)]
    for k, (i_s, o_s) in enumerate(zip(ins, outs, strict=True)):
        for i in o_s:
            producer[i] = k
        for i in dict.fromkeys(i_s):
            consumers[i].append(k)
    return producer, consumers


def _tensor_representatives(rep: list[int], ins: list[tuple[int, ...]],
                            outs: list[tuple[int, ...]], producer: list[int],
                            consumers: list[list[int]]) -> list[int]:
    """Each tensor's representative: a later block's results stand for the first block's, and
    so does a source only that block reads (its own weight)."""
    rep_t = list(range(len(producer)))
    for k, r in enumerate(rep):
        if r == k:
            continue
        for i, j in zip(ins[k], ins[r], strict=True):
            if producer[i] < 0 and i != j and all(rep[c] != c for c in consumers[i]):
                rep_t[i] = j
        for i, j in zip(outs[k], outs[r], strict=True):
            rep_t[i] = j
    return rep_t
