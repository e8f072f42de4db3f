"""Masked pending sums in completion: needs that only drop a mask, and the pairing check.

A rule that knows no masks (``spmdrules.engine.masks``) answers for an operand's plain sum; when
that is all it changes, the op reads the masked sum as it is (the data is the same), so the need
is the operand's own attribute and no edge is planned: :func:`unmasked_needs`.

A rule pairs two masked operands by their letter, not by where they come from. After a run,
:func:`unproven` traces every mask back to the ops that made it (a lookup: an op whose result
is masked on a mesh dim none of its operands is masked on) and returns the ops whose pairing
it cannot prove: two masks pair when their lookups are alike, i.e. of the same op type and
attributes, reading by the very same tensors wherever an operand is not split on the mesh dim,
and reading tables that the mesh dim splits on the same dim of the same size. Such lookups give
every row the same owner. ``complete`` then runs again with those ops seeing plain sums.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from spmdrules.core.attr import DistAttr
from spmdrules.core.spec import TensorSpec
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Op

R = TypeVar("R")


def unmasked_needs(given: Sequence[TensorSpec], need: tuple[DistAttr, ...]
                   ) -> tuple[DistAttr, ...]:
    """``need`` with each attribute that is an operand's own but for a dropped mask replaced by
    the operand's own (its data serves as is)."""
    out: list[DistAttr] | None = None
    for pos, (s, n) in enumerate(zip(given, need, strict=False)):
        a = s.attr
        if a.mask_items and n is not a and n == a.without_masks():
            if out is None:
                out = list(need)
            out[pos] = a
    return need if out is None else tuple(out)


def only_unmasked(src: DistAttr, dst: DistAttr) -> bool:
    """``dst`` is ``src`` with some of its masks dropped: no data moves."""
    return (bool(src.mask_items) and set(dst.mask_items) <= set(src.mask_items)
            and src.without_masks() == dst.without_masks())


#: a lookup's signature: what decides which process holds each row it reads
Signature = tuple[Any, ...]


def _signature(op: Op, m: int, attr_of: dict[str, DistAttr]) -> Signature:
    parts: list[Any] = [op.type, repr(op.attrs)]
    for t in op.inputs:
        a = attr_of[t.name]
        split = [(d, t.shape[d]) for d, ms in enumerate(a.multi_dims_mapping) if m in ms]
        parts.append(("split", tuple(split), a.mesh) if split else ("by", t.name))
    return tuple(parts)


def unproven(ops: Sequence[Op], attr_of: dict[str, DistAttr]) -> set[str]:
    """Names of the ops whose result pairs masks not proven to come from alike lookups."""
    sources: dict[tuple[str, int], frozenset[Signature]] = {}
    bad: set[str] = set()
    for op in ops:
        ins = op.inputs
        for r in op.outputs:
            for m, _ in attr_of[r.name].mask_items:
                masked_in = [t for t in ins if any(mm == m for mm, _ in attr_of[t.name].mask_items)]
                if not masked_in:
                    sig = frozenset({_signature(op, m, attr_of)})
                else:
                    # a mask no op here made (a graph input's, as given) is its tensor's own
                    found = {sources.get((t.name, m), frozenset({("given", t.name)}))
                             for t in masked_in}
                    if len(masked_in) > 1 and (len(found) > 1 or any(len(f) != 1 for f in found)):
                        bad.add(op.name)
                    sig = frozenset().union(*found)
                sources[(r.name, m)] = sig
    return bad


def proven(graph: Graph, run: Callable[[frozenset[int]], R]) -> R:
    """``run(plain_ops)`` (a completion of ``graph`` whose ops ``plain_ops`` see plain sums),
    again with the ops whose pairing of masks :func:`unproven` finds added, until none is."""
    plain_ops: frozenset[int] = frozenset()
    result = run(plain_ops)
    while any(t.attr is not None and t.attr.mask_items for t in graph.tensors):
        attr_of = {t.name: t.attr for t in graph.tensors if t.attr is not None}
        index = {op.name: k for k, op in enumerate(graph.ops)}
        more = frozenset(index[n] for n in unproven(graph.ops, attr_of)) - plain_ops
        if not more:
            break
        plain_ops |= more
        result = run(plain_ops)
    return result


__all__ = ["only_unmasked", "proven", "unmasked_needs", "unproven"]
