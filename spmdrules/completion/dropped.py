"""Dropped splits: where a mesh dim that splits an op's operand reaches none of its results,
though the op's rule would have kept it (``docs/completion.md``, "Dropped splits").

Read off a finished run: an op can drop a split only where one of its tensors changes layout,
so only the ops with a reshard edge are examined, and the pass itself pays nothing.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import lru_cache
from math import prod
from types import MappingProxyType

from spmdrules.completion.result import (
    DroppedSplit,
    DroppedSplitWarning,
    Rejected,
    ReshardEdge,
    table,
)
from spmdrules.completion.run_state import RunState
from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError, printable
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.spec import TensorSpec
from spmdrules.graph.nodes import Tensor

#: why a result does not take what its producer makes (``Rejected.reason``)
_CHOICES = ("priority", "annotation", "cost", "divisibility")


# cached: a model's layers repeat their layouts, so a few attributes serve every edge
@lru_cache(maxsize=4096)
def _split_dims(a: DistAttr) -> Mapping[int, int]:
    """Mesh dim -> the tensor dim it splits."""
    return MappingProxyType({m: d for d, ms in enumerate(a.multi_dims_mapping) for m in ms})


@lru_cache(maxsize=4096)
def _held(a: DistAttr) -> frozenset[int]:
    """The mesh dims that split ``a`` or hold a pending reduction of it."""
    return frozenset((*_split_dims(a), *a.partial))


def find_dropped(
    run: RunState,
    reshards: Sequence[ReshardEdge],
    rejected: Callable[[Tensor], tuple[Rejected, ...]],
) -> tuple[DroppedSplit, ...]:
    """Every dropped split of a finished run, in op order: one per op and tensor dim, its mesh
    dims together."""
    g, st = run.g, run.st
    by_op: dict[str, tuple[list[ReshardEdge], set[int]]] = {}
    for e in reshards:
        # a drop needs an edge that loses a split: an operand's the op needs without it, or a
        # result's that its rule makes; reducing a pending sum loses none
        if e.cross_mesh:
            continue
        lost = _split_dims(e.src).keys() - _held(e.dst)
        if lost:
            edges, dims = by_op.setdefault(e.op, ([], set()))
            edges.append(e)
            dims |= lost
    out: list[DroppedSplit] = []
    for name, (edges, dims) in by_op.items():
        op = g.op(name)
        mesh = edges[0].src.mesh
        for t in op.outputs:
            a = st.attr[t.order]
            if a is not None and a.mesh == mesh:
                dims -= _held(a)
        if not dims:
            continue
        held: set[int] = set()
        for t in op.inputs:
            a = st.attr[t.order]
            if a is not None and a.mesh == mesh:
                held |= _held(a)
        for m in sorted(dims & held):
            found = (_by_choice(op.name, m, edges, rejected, g.tensor)
                     or _by_conflict(run, op.order, m, edges, rejected, g.tensor)
                     or _by_extent(run, op.order, m, edges))
            if found is not None:
                out.append(found)
    return tuple(sorted(_merged(out), key=lambda d: g.op(d.op).order))


def _merged(found: list[DroppedSplit]) -> list[DroppedSplit]:
    """One entry per split: the mesh dims of a co-shard dropped together join, major first."""
    by_split: dict[tuple[str, str, int], DroppedSplit] = {}
    for d in found:
        key = (d.op, d.tensor, d.dim)
        have = by_split.get(key)
        if have is None:
            by_split[key] = d
            continue
        names = d.kept.mesh.dim_names
        order = [names[m] for m in d.kept.multi_dims_mapping[d.dim]]
        dims = sorted({*have.mesh_dims, *d.mesh_dims},
                      key=lambda n: order.index(n) if n in order else len(order))
        by_split[key] = replace(have, mesh_dims=tuple(dims))
    return list(by_split.values())


def _reason(rejected: tuple[Rejected, ...], op: str, kind: str, reasons: tuple[str, ...]) -> str:
    """Why the tensor did not take what ``op`` offered it, in ``explain``'s words."""
    for r in rejected:
        if r.offer.op == op and r.offer.kind == kind and r.reason in reasons:
            return f"{r.reason}: {r.detail}"
    return ""


def _by_choice(
    op: str, m: int, edges: list[ReshardEdge], rejected: Callable[[Tensor], tuple[Rejected, ...]],
    tensor: Callable[[str], Tensor],
) -> DroppedSplit | None:
    """The op's rule makes a result split over ``m``, and completion laid it out otherwise."""
    for e in edges:
        if e.side != "result":
            continue
        dim = _split_dims(e.src).get(m)
        if dim is not None:
            why = _reason(rejected(tensor(e.tensor)), op, "forward", _CHOICES)
            if why.startswith("annotation"):
                continue  # the user's own layout for the result: nothing silent
            return DroppedSplit(e.tensor, op, "result", (e.src.mesh.dim_names[m],), dim, e.shape,
                                e.src, e.dst, why)
    return None


def _by_conflict(
    run: RunState, k: int, m: int, edges: list[ReshardEdge],
    rejected: Callable[[Tensor], tuple[Rejected, ...]], tensor: Callable[[str], Tensor],
) -> DroppedSplit | None:
    """The rule needs an operand without ``m`` given the op's other operands, and given that
    operand alone it keeps ``m`` on a result (split or pending): the other operands made it drop
    the split.
    Alone and still dropped, the op cannot keep it (a reduction over that dim): not a drop."""
    op = run.ops[k]
    for e in edges:
        dim = _split_dims(e.src).get(m)
        if e.side != "operand" or dim is None or m in _held(e.dst):
            continue
        outs = _alone(run, k, e.slot, e.src.mesh)
        if outs is None:
            continue
        if any(m in _held(a) for a in outs):
            # a conflict the pass settled recorded its words; else explain's for an operand edge
            why = (_reason(rejected(tensor(e.tensor)), op.name, "demand", ("rule",))
                   or f"rule: {op.name}'s rule needs {e.dst.mapping_str()} given its other "
                      "operands")
            return DroppedSplit(e.tensor, op.name, "operand", (e.src.mesh.dim_names[m],),
                                dim, e.shape,
                                e.src, e.dst, why)
    return None


def _by_extent(run: RunState, k: int, m: int, edges: list[ReshardEdge]) -> DroppedSplit | None:
    """The rule needs an operand without ``m`` even alone, where a result of the op is shorter
    on that dim than the split's pieces (a window op whose output collapses below the mesh): the
    split no longer fits there, and only it goes (issue 24)."""
    op = run.ops[k]
    for e in edges:
        dim = _split_dims(e.src).get(m)
        if e.side != "operand" or dim is None or m in _held(e.dst):
            continue
        mesh = e.src.mesh
        n = prod(mesh.shape[x] for x in e.src.multi_dims_mapping[dim])
        for t in op.outputs:
            if len(t.shape) == len(e.shape) and t.shape[dim] < n <= e.shape[dim]:
                return DroppedSplit(
                    e.tensor, op.name, "operand", (mesh.dim_names[m],), dim, e.shape, e.src,
                    e.dst, f"extent: its result {t.name!r} {list(t.shape)} has dim {dim} of "
                    f"length {t.shape[dim]}, shorter than the split's {n} pieces, so the op's "
                    "rule reads the dim whole")
    return None


def _alone(run: RunState, k: int, slot: int, mesh: ProcessMesh) -> tuple[DistAttr, ...] | None:
    """What op ``k``'s rule makes given its operand in ``slot`` alone, its other operands (and a
    generic rule's results) unknown; None if it refuses that."""
    if len(run.ins[k]) == 1:
        return run.st.natural[k]  # nothing else: its answer as completed, no rule call
    op = run.ops[k]
    full = run.spec_fn(mesh)
    calls = itertools.count()  # by slot, not by tensor: an op may take one tensor twice

    def spec(t: Tensor) -> TensorSpec:
        return full(t) if next(calls) == slot else run.placeholder(mesh, t.shape)

    try:
        return op.flat_info(op.rule.infer_forward(*op.forward_args(spec)))[1]
    except SpmdError:
        return None


def dropped_lines(dropped: Sequence[DroppedSplit]) -> list[str]:
    """The summary's account of the dropped splits: a count, then one row each."""
    if not dropped:
        return []
    rows = [("tensor", "at op", "mesh dims", "dim", "rule makes", "laid out", "why")]
    rows.extend((d.tensor, d.op, ", ".join(d.mesh_dims), str(d.dim), d.kept.mapping_str(),
                 d.got.mapping_str(), d.reason or "no offer was refused") for d in dropped)
    return [f"  dropped splits {len(dropped)} (a mesh dim that splits an op's operand and "
            "reaches none of its results, though its rule keeps it):", table(rows)]


def warn_dropped(dropped: Sequence[DroppedSplit]) -> None:
    """One ``DroppedSplitWarning`` per dropped split, attributed to ``complete``'s caller."""
    for d in dropped:
        # names reach the terminal: escaped, as in every SpmdError's message
        warnings.warn(DroppedSplitWarning(printable(str(d))), stacklevel=3)
