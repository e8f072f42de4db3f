"""Reshard edges: where a finished run's tensors are not laid out as their ops need or make
them."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from spmdrules.completion.masks import only_unmasked
from spmdrules.completion.result import ReshardEdge
from spmdrules.completion.run_state import RunState
from spmdrules.core.attr import DistAttr

#: (tensor, op, side, src, dst, slot): one reshard edge by index; ``slot`` is the operand's (or
#: result's) position among the op's flattened operands (results), so that an op taking one
#: tensor in two slots gets one edge per slot
RawEdge = tuple[int, int, Literal["operand", "result"], DistAttr, DistAttr, int]


def reshard_edges(run: RunState) -> tuple[ReshardEdge, ...]:
    """One edge per tensor and target layout, shared by its consumers (``shared``)."""
    tensors, ops = run.tensors, run.ops
    first: dict[int, list[int]] = {}  # tensor -> its operand edges' positions in ``out``
    shared: dict[int, list[tuple[str, int]]] = {}
    out: list[ReshardEdge] = []
    shapes = run.shapes
    for i, k, side, src, dst, slot in raw_edges(run):
        mine = first.setdefault(i, []) if side == "operand" else []
        at = next((j for j in mine if out[j].dst == dst), -1)
        if at >= 0:
            shared.setdefault(at, []).append((ops[k].name, slot))
            continue
        mine.append(len(out))
        t = tensors[i]
        out.append(ReshardEdge(t.name, ops[k].name, side, src, dst, shapes[i], t.dtype, slot))
    for at, more in shared.items():  # the first consumer's edge; the lowering runs it once
        out[at] = dataclasses.replace(out[at], shared=tuple(more))
    return tuple(out)


def raw_edges(run: RunState) -> list[RawEdge]:
    """(tensor, op, side, src, dst, slot) of every reshard edge, in op order. A repeated block
    whose attributes and rule answers are an earlier block's has that block's edges."""
    st = run.st
    attrs, needs, natural = st.attr, st.needs, st.natural
    blocks, block_of = run.blocks, run.block_of
    out: list[RawEdge] = []
    seen: dict[int, tuple[tuple[Any, ...], list[Any]]] = {}  # per run: state, local edges
    # by index: iterating the Op objects themselves would touch each one (its reference
    # count), a cache miss per op on large models, where only the few with an edge are read
    k, n = 0, len(needs)
    while k < n:
        b = block_of[k] if blocks else -1
        if b < 0 or blocks[b].start != k:
            op_edges(run, k, out)
            k += 1
            continue
        blk = blocks[b]
        key = (blk.gather(attrs), needs[blk.start:blk.stop], natural[blk.start:blk.stop])
        prev = seen.get(blk.run)
        if prev is not None and prev[0] == key:
            for j, dk, side, src, dst, slot in prev[1]:
                out.append((blk.tensors[j], blk.start + dk, side, src, dst, slot))
        else:
            mine: list[RawEdge] = []
            for kk in range(blk.start, blk.stop):
                op_edges(run, kk, mine)
            local = {i: j for j, i in enumerate(blk.tensors)}
            seen[blk.run] = (key, [(local[i], kk - blk.start, side, src, dst, slot)
                                   for i, kk, side, src, dst, slot in mine])
            out.extend(mine)
        k = blk.stop
    return out


def op_edges(run: RunState, k: int, out: list[RawEdge]) -> None:
    """Op ``k``'s reshard edges: its operands as it needs them, its results as it makes them."""
    st = run.st
    attrs = st.attr
    need, nat = st.needs[k], st.natural[k]
    assert need is not None and nat is not None
    for slot, (i, n) in enumerate(zip(run.ins[k], need, strict=True)):
        a = attrs[i]
        if a is not n and a != n and not (a is not None and only_unmasked(a, n)):
            assert a is not None
            out.append((i, k, "operand", a, n, slot))
    for slot, (i, n) in enumerate(zip(run.outs[k], nat, strict=True)):
        a = attrs[i]
        if a is not n and a != n and not (a is not None and only_unmasked(n, a)):
            assert a is not None
            out.append((i, k, "result", n, a, slot))
