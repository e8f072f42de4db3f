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
    ops = g.ops
    tensors = g.tensors
    ins = [tuple(t.order for t in op.inputs) for op in ops]
    outs = [tuple(t.order for t in op.outputs) for op in ops]
    producer = [-1] * len(tensors)
    consumers: list[list[int]] = [[] for _ in tensors]
    for k, (i_s, o_s) in enumerate(zip(ins, outs, strict=True)):
        for i in o_s:
            producer[i] = k
        for i in dict.fromkeys(i_s):
            consumers[i].append(k)
    codes: dict[Any, int] = {}
    code = [codes.setdefault((op.type, repr(op.attrs), repr(op.extra)), len(codes))
            for op in ops]
    kinds: dict[tuple[tuple[int, ...], str], int] = {}
    kind = [kinds.setdefault((t.shape, t.dtype), len(kinds)) for t in tensors]
    _, blocks = find_blocks(ins, outs, producer, consumers, code, kind)
    rep = list(range(len(ops)))
    rep_t = list(range(len(tensors)))
    first: dict[int, int] = {}
    for b in blocks:
        start = first.setdefault(b.run, b.start)
        for k in range(b.start, b.stop):
            rep[k] = start + (k - b.start)
    for k, r in enumerate(rep):
        if r == k:
            continue
        for i, j in zip(ins[k], ins[r], strict=True):
            # a source only this block reads (its own weight) stands for the first block's
            if producer[i] < 0 and i != j and all(rep[c] != c for c in consumers[i]):
                rep_t[i] = j
        for i, j in zip(outs[k], outs[r], strict=True):
            rep_t[i] = j
    return Quotient(tuple(rep), tuple(rep_t), Counter(rep), Counter(rep_t), len(blocks))
