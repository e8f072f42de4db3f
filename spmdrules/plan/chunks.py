"""``ColwiseParallel(chunks=...)``: a fused projection split within each of its chunks.

A fused projection's output is cut into chunks by position (q | k | v). Split contiguously on
a mesh dim of n processes, a process's block straddles the chunks, so each cut needs the whole
output. Megatron instead stores the weight *interleaved* (``spmdrules.graph.storage``): block r
of every chunk together, so the contiguous split gives process r the r-th block of each chunk.
The graph then computes on the stored order, and every cut of the output into a chunk is
rewritten to take, from each process's block, that chunk's part:

    y [.., N] --reshape--> [.., n, N/n] --slice offset_c : offset_c + s_c/n--> [.., n, s_c/n]
              --reshape--> [.., s_c]            (the cut's own result, with its readers)

Every step keeps the split (the outer factor of each reshape carries it), so completion plans no
communication there, and the chunks come out exactly as the user's model makes them. The
order is internal, like a split: ``Tensor.storage`` records it on the weight, the bias and the
values computed from them before the cuts, and every executor converts where values enter and
leave (``Program.storage``), so users feed, fetch and get gradients in their own order.

The output may reach its cuts through the bias add and reshapes that keep the feature dim last
(GPT-2's ``addmm`` and views); a cut is a ``split`` of the feature dim into exactly the chunks,
or a ``slice`` of exactly one chunk. Anything else reading the interleaved values would read
them out of order, so it is a ``PlanTargetError`` naming the op; nothing is rewritten unless the
whole entry fits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from spmdrules.core.tables import OpTable, caller
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Op, Tensor
from spmdrules.graph.storage import Interleaved, StorageError
from spmdrules.plan.errors import PlanTargetError

#: ops that only permute a weight's dims on its way to the matmul that uses it
TRANSPOSES = frozenset({"transpose", "transpose2"})


@dataclass(frozen=True, slots=True)
class WeightUse:
    """How an op reads the weight a plan style splits, always its second input: ``kind``
    ``"linear"`` (features in, features out) or ``"embedding"`` (rows looked up by id), and
    ``dims(op, ndim)``, the (output-feature, input-feature) dims of the tensor it reads (for an
    embedding the "input" dim is the vocabulary)."""

    kind: Literal["linear", "embedding"]
    dims: Callable[[Op, int], tuple[int, int]]


#: op name -> how it reads a weight: the ops ColwiseParallel, RowwiseParallel and VocabParallel
#: find a weight's feature dims through (``register_weight_use``)
WEIGHT_USES: Final[OpTable[WeightUse]] = OpTable("plan weight use")


def register_weight_use(names: Sequence[str], use: WeightUse, *,
                        origin: str | None = None) -> None:
    """Let plan styles find the feature dims of a weight that each op of ``names`` reads."""
    WEIGHT_USES.add_all(names, use, origin if origin is not None else caller(1))


def _matmul_dims(op: Op, nd: int) -> tuple[int, int]:
    trans = op.type != "bmm" and bool(op.attr("trans_y"))
    return (nd - 2, nd - 1) if trans else (nd - 1, nd - 2)


register_weight_use(("matmul", "matmul_v2", "bmm"), WeightUse("linear", _matmul_dims))
register_weight_use(("embedding", "lookup_table_v2"), WeightUse("embedding", lambda op, nd: (1, 0)))


@dataclass(frozen=True)
class ChunkRewrite:
    """What one chunk-aware entry does to one module, checked before the graph changes."""

    weight: Tensor
    bias: Tensor | None
    weight_storage: Interleaved
    bias_storage: Interleaved | None
    #: the ops that cut the interleaved output into its chunks
    cuts: tuple[Op, ...]
    #: the values computed from the weight before the cuts (the matmul's output, the bias
    #: add, reshapes), interleaved along their last dim
    values: tuple[Tensor, ...]

    def apply(self) -> None:
        """Store the parameters interleaved, record that the values before the cuts are, and
        rewrite every cut (see the module docs)."""
        self.weight.storage = self.weight_storage
        if self.bias is not None:
            self.bias.storage = self.bias_storage
        for t in self.values:
            t.storage = dataclasses.replace(self.weight_storage, dim=t.ndim - 1)
        lay = self.weight_storage
        for cut in self.cuts:
            _rewrite(cut, lay)


def chunk_sizes(chunks: object, extent: int, source: str) -> tuple[int, ...]:
    """The chunks' sizes: ``chunks`` equal ones, or sizes given absolute or relative."""
    parts = (1,) * chunks if isinstance(chunks, int) and not isinstance(chunks, bool) else chunks
    if (not isinstance(parts, tuple) or not parts
            or any(isinstance(p, bool) or not isinstance(p, int) or p <= 0 for p in parts)):
        raise PlanTargetError(f"{source}: chunks={chunks!r} must be a positive int (equal "
                              "chunks) or a tuple of positive ints (their sizes, absolute or "
                              "relative: (2, 1, 1) for 8 query heads and 4 key-value heads)")
    total = sum(parts)
    if extent % total:
        raise PlanTargetError(f"{source}: the output features ({extent}) do not divide into "
                              f"chunks in the proportions {list(parts)}; give the chunks' sizes")
    return tuple(p * (extent // total) for p in parts)


def plan_rewrite(weight: Tensor, bias: Tensor | None, out_dim: int, chunks: object, ways: int,
                 source: str) -> ChunkRewrite | None:
    """Check that ``weight``'s module is a fused projection cut into ``chunks`` and return its
    rewrite; None when it is already stored so (the plan applied again)."""
    extent = weight.shape[out_dim]
    sizes = chunk_sizes(chunks, extent, source)
    try:
        lay = Interleaved(out_dim, sizes, ways)
        bias_lay = None if bias is None else Interleaved(bias.ndim - 1, sizes, ways)
    except StorageError as e:
        raise PlanTargetError(f"{source} on {weight.name!r} {list(weight.shape)}: {e}") from e
    if weight.storage is not None:
        if weight.storage == lay:
            return None
        raise PlanTargetError(f"{source}: {weight.name!r} is already stored as {weight.storage}; "
                              "apply one chunk-aware plan to a graph")
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != extent):
        raise PlanTargetError(f"{source}: bias {bias.name!r} {list(bias.shape)} is not one value "
                              f"per output feature ({extent}); use a raw spec for this module")
    outputs = list(_matmul_outputs(weight, source))
    cuts: list[Op] = []
    seen_bias: set[str] = set()
    values: dict[str, Tensor] = {}
    todo = outputs
    while todo:
        t = todo.pop()
        values[t.name] = t
        for op in t.consumers:
            nxt = _follow(op, t, bias, sizes, source)
            if nxt is None:
                cuts.append(op)
            else:
                if op.type == "add":
                    seen_bias.add(op.name)
                todo.append(nxt)
    if bias is not None:
        stray = [op.name for op in bias.consumers if op.name not in seen_bias]
        if stray:
            raise PlanTargetError(f"{source}: bias {bias.name!r} is also read by {stray}, which "
                                  "would read it interleaved; use a raw spec for this module")
    if not cuts:
        raise PlanTargetError(f"{source}: nothing cuts the output of {weight.name!r} into "
                              f"chunks; use ColwiseParallel() without chunks")
    graph = weight.graph
    assert isinstance(graph, Graph)
    _check_names(graph, cuts)
    return ChunkRewrite(weight, bias, lay, bias_lay, tuple(sorted(set(cuts), key=_name)),
                        tuple(values.values()))


def _name(op: Op) -> str:
    return op.name


def _matmul_outputs(weight: Tensor, source: str) -> Iterator[Tensor]:
    """The results of the matmuls reading ``weight`` (through transposes); any other reader is
    an error, since it would read the interleaved values."""
    for op in weight.consumers:
        if op.type in TRANSPOSES:
            yield from _matmul_outputs(op.outputs[0], source)
        elif (use := WEIGHT_USES.lookup(op.type)) is not None and use.kind == "linear" \
                and op.inputs.index(weight) == 1:
            yield op.outputs[0]
        else:
            raise PlanTargetError(
                f"{source}: {op.type} op {op.name!r} reads {weight.name!r} other than as a "
                "matmul's weight, and would read it interleaved; use a raw spec for it")


def _follow(op: Op, t: Tensor, bias: Tensor | None, sizes: tuple[int, ...],
            source: str) -> Tensor | None:
    """The next interleaved tensor after ``op`` (a bias add, a reshape keeping the features
    last), or None when ``op`` cuts ``t`` into its chunks; any other op is an error."""
    n = sum(sizes)
    last = t.ndim - 1
    if op.type == "add" and bias is not None and set(op.inputs) == {t, bias}:
        return op.outputs[0]
    if op.type == "reshape" and op.outputs[0].shape[-1:] == (n,):
        return op.outputs[0]
    if op.type == "split" and op.attr("axis") % t.ndim == last:
        if tuple(op.attr("sections")) == sizes:
            return None
    elif op.type == "slice" and list(op.attr("axes")) == [last] and not op.attr("decrease_axis"):
        offsets = [sum(sizes[:c]) for c in range(len(sizes))]
        if (_start(op, n), op.outputs[0].shape[last]) in zip(offsets, sizes, strict=True):
            return None
    raise PlanTargetError(
        f"{source}: {op.type} op {op.name!r} reads the fused output {t.name!r} "
        f"{list(t.shape)}, but not as a cut into its chunks {list(sizes)} (a split of the last "
        "dim into exactly them, or a slice of one of them); give the chunks the model cuts, or "
        "use ColwiseParallel() without chunks")


def _start(op: Op, n: int) -> int:
    """A slice's first index along a dim of ``n``, as the slice rule reads it (clamped)."""
    start = int(op.attr("starts")[0])
    return min(max(start + n if start < 0 else start, 0), n)


def _new_names(cut: Op, k: int) -> tuple[str, str, str]:
    return f"{cut.name}.blocks", f"{cut.name}.chunk{k}", f"{cut.name}.chunk{k}.merge"


def _check_names(g: Graph, cuts: list[Op]) -> None:
    for cut in cuts:
        for k in range(len(cut.outputs)):
            taken = [m for m in _new_names(cut, k) if m in g]
            if taken:
                raise PlanTargetError(f"rewriting the cut {cut.name!r} needs the names {taken}, "
                                      f"which graph {g.name!r} already holds")


def _rewrite(cut: Op, lay: Interleaved) -> None:
    """Replace ``cut`` by a reshape into the processes' blocks and, per chunk it makes, a slice
    of the chunk's part of each block and a reshape back (module docs)."""
    [y] = cut.inputs
    graph = y.graph
    assert isinstance(graph, Graph)
    lead, n, w = list(y.shape[:-1]), lay.extent, lay.ways
    offsets, starts = lay.block_offsets(), [sum(lay.sizes[:c]) for c in range(len(lay.sizes))]
    results = cut.outputs
    chunk_of = list(range(len(results))) if cut.type == "split" else [
        starts.index(_start(cut, n))]
    graph.remove_op(cut)
    blocks_name = _new_names(cut, 0)[0]
    graph.add_op("reshape", [y], {"shape": [*lead, w, n // w]}, name=blocks_name)
    for k, r in enumerate(results):
        c = chunk_of[k]
        _, part, merge = _new_names(cut, k)
        graph.add_op("slice", [blocks_name], {"axes": [len(lead) + 1], "starts": [offsets[c]],
                                              "ends": [offsets[c] + lay.sizes[c] // w]},
                     name=part)
        graph.add_op("reshape", [part], {"shape": [*lead, lay.sizes[c]]}, name=merge,
                     results=[r.name])
