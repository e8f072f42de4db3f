"""Each op's candidate layouts, read off its forward rule (DTensor's single-dim strategies).

For one mesh dim ``m``, the op's rule is asked, for each operand and each of its dims, what it
does when that dim alone is split over ``m`` (the other operands replicated). Where the rule
keeps the split, its answer is a *single-dim strategy*: the layouts of every operand the op then
needs and of every result it makes, on ``m``. Strategies on several mesh dims are the products of
single-dim ones (a tensor dim split by two mesh dims takes them major first), each checked again
by the rule: a combination is a candidate only where the rule accepts its operands as they are
(no reshard in the op) and every layout splits its dims evenly. Replicated is always a
candidate. Nothing here knows an op by name: the rules decide.

A pending sum is made only by an op, never by a reshard; so an operand is also asked about, on
its one mesh dim, each pending sum its producer's candidates may hand on (``pending``, from
the solver): a lookup in a table split on its rows makes a *masked* one (each row's value on
the one process holding its table row, zeros elsewhere: Mixtral's experts), and the ops that
take it as it is carry it on (expert parallelism, as a hand plan writes it).

The probes also give the op's *contractions* (a split of two operands together that leaves a
result a pending sum: matmul's ``k``; a lookup's split table is one operand, so no
contraction) and the dims no mesh dim may split (a kernel
window), from which ``spmdrules.auto.cost`` counts the op's flops.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from spmdrules.completion.local_shards import divisible
from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.spec import TensorSpec
from spmdrules.graph.nodes import Op, Tensor

#: the most candidates an op keeps (a 3-D mesh multiplies the single-dim strategies; the
#: combinations are tried in order, fewer mesh dims first)
MAX_CANDIDATES: Final = 96
#: how many op signatures (with their mesh and layouts) each of auto's memos keeps: a model
#: repeats its layers, so a few thousand cover one; a process planning many models evicts the
#: oldest
MEMO_SIZE: Final = 4096
#: per operand slot, the pending sums (each on one mesh dim) its producer may make
Pending = tuple[frozenset[DistAttr], ...]


@dataclass(frozen=True, slots=True)
class Strategy:
    """One way to run an op: the layouts it needs of its operands and makes of its results
    (flattened as ``Op.inputs`` and ``Op.outputs``), and over how many processes its work is
    divided (the product of the mesh dims that split a result or leave it a pending sum)."""

    inputs: tuple[DistAttr, ...]
    outputs: tuple[DistAttr, ...]
    split: int

    @property
    def work_dims(self) -> frozenset[int]:
        """The mesh dims that divide the op's work."""
        dims: set[int] = set()
        for a in self.outputs:
            dims |= a.sharded_mesh_dims | a.partial_dims
        return frozenset(dims)


@dataclass(frozen=True, slots=True)
class Shape:
    """What the probes tell of an op's arithmetic: per operand, the dims whose split leaves a
    result a plain pending sum (contracted) and the dims the rule never lets a mesh dim split."""

    contracted: tuple[tuple[int, ...], ...]
    whole: tuple[tuple[int, ...], ...]


def _spec_fn(attrs: dict[int, DistAttr], mesh: ProcessMesh) -> Callable[[Tensor], TensorSpec]:
    def spec(t: Tensor) -> TensorSpec:
        a = attrs.get(id(t))
        return TensorSpec._make(t.shape, a if a is not None else
                                DistAttr.replicated(mesh, len(t.shape)))
    return spec


def answer(op: Op, mesh: ProcessMesh, given: Sequence[DistAttr]
           ) -> tuple[tuple[DistAttr, ...], tuple[DistAttr, ...]] | None:
    """The rule's answer for the operands laid out as ``given`` (None: it refuses them)."""
    attrs = {id(t): a for t, a in zip(op.inputs, given, strict=True)}
    try:
        info = op.rule.infer_forward(*op.forward_args(_spec_fn(attrs, mesh)))
        return op.flat_info(info)
    except (SpmdError, ValueError, TypeError, IndexError):
        return None  # a rule that refuses a layout is no candidate, whatever it raises


def _with_split(a: DistAttr, d: int, m: int) -> DistAttr:
    mdm = tuple((*ms, m) if k == d else ms for k, ms in enumerate(a.multi_dims_mapping))
    return DistAttr._make(a.mesh, mdm, a.partial_items)


def _split(mesh: ProcessMesh, outs: Sequence[DistAttr]) -> int:
    dims: set[int] = set()
    for a in outs:
        dims |= a.sharded_mesh_dims | a.partial_dims
    return math.prod(mesh.shape[m] for m in dims)


def _even(op: Op, ins: Sequence[DistAttr], outs: Sequence[DistAttr]) -> bool:
    return all(divisible(a, t.shape) for t, a in zip(op.inputs, ins, strict=True)) and all(
        divisible(a, t.shape) for t, a in zip(op.outputs, outs, strict=True))


def single_dim(op: Op, mesh: ProcessMesh, m: int, pending: Pending = ()
               ) -> list[tuple[DistAttr, ...]]:
    """The op's single-dim strategies on mesh dim ``m``: the operands' layouts (on ``m`` only)
    for each operand dim whose split over ``m`` the rule keeps, and for each pending sum on
    ``m`` in ``pending`` (per operand slot) that the rule takes as it is."""
    rep = [DistAttr.replicated(mesh, len(t.shape)) for t in op.inputs]
    out: dict[tuple[DistAttr, ...], None] = {}
    for probe in _pending_probes(pending, m):
        given = list(rep)
        for i, p in probe:
            given[i] = p
        got = answer(op, mesh, given)
        if got is not None and all(got[0][i] == p for i, p in probe):
            out[got[0]] = None
    for i, t in enumerate(op.inputs):
        for d, size in enumerate(t.shape):
            if size < mesh.shape[m]:
                continue
            given = list(rep)
            given[i] = _with_split(rep[i], d, m)
            got = answer(op, mesh, given)
            if got is not None and m in got[0][i].multi_dims_mapping[d]:
                out[got[0]] = None
    return list(out)


def _pending_probes(pending: Pending, m: int) -> list[list[tuple[int, DistAttr]]]:
    """The operand layouts to ask the rule about on mesh dim ``m``: each operand's pending sum
    on ``m`` alone, and, where several operands have one, each's first at once (a masked
    product of two masked operands)."""
    on_m = [sorted((p for p in pieces if p.partial_dims == {m}), key=repr) for pieces in pending]
    probes = [[(i, p)] for i, ps in enumerate(on_m) for p in ps]
    if sum(bool(ps) for ps in on_m) > 1:
        probes.append([(i, ps[0]) for i, ps in enumerate(on_m) if ps])
    return probes


def probe_shape(op: Op) -> Shape:
    """The op's contracted and whole dims, from its rule on a mesh of two processes."""
    mesh = ProcessMesh([0, 1])
    rep = [DistAttr.replicated(mesh, len(t.shape)) for t in op.inputs]
    contracted: list[tuple[int, ...]] = []
    whole: list[tuple[int, ...]] = []
    for i, t in enumerate(op.inputs):
        c: list[int] = []
        w: list[int] = []
        for d in range(len(t.shape)):
            given = list(rep)
            given[i] = _with_split(rep[i], d, 0)
            got = answer(op, mesh, given)
            if got is None or 0 not in got[0][i].multi_dims_mapping[d]:
                w.append(d)
            elif (sum(0 in a.sharded_mesh_dims for a in got[0]) >= 2
                  and any(0 in a.partial_dims for a in got[1])
                  and not any(0 in a.sharded_mesh_dims for a in got[1])):
                c.append(d)
        contracted.append(tuple(c))
        whole.append(tuple(w))
    return Shape(tuple(contracted), tuple(whole))


def _merge(mesh: ProcessMesh, parts: Sequence[tuple[DistAttr, ...]]) -> tuple[DistAttr, ...]:
    """The operands' layouts with each part's splits and pending sums (one mesh dim each),
    splits major first."""
    merged: list[DistAttr] = []
    for i in range(len(parts[0])):
        mdm: list[tuple[int, ...]] = [()] * parts[0][i].ndim
        for p in parts:
            for d, ms in enumerate(p[i].multi_dims_mapping):
                mdm[d] = (*mdm[d], *ms)
        part = tuple(sorted(x for p in parts for x in p[i].partial_items))
        masks = tuple(sorted(x for p in parts for x in p[i].mask_items))
        merged.append(DistAttr._make(mesh, tuple(mdm), part, masks))
    return tuple(merged)


def pending_pieces(a: DistAttr) -> frozenset[DistAttr]:
    """Each pending sum of ``a`` alone, on its one mesh dim, with its mask: what a consumer's
    rule is asked about when ``a``'s producer may make it (a pending sum is made only by an op:
    a contraction's, or a lookup's in a table split on its rows, which is masked)."""
    masks = a.masks
    return frozenset(
        DistAttr._make(a.mesh, ((),) * a.ndim, ((m, r),), ((m, masks[m]),) if m in masks else ())
        for m, r in a.partial_items)


def signature(op: Op) -> tuple[Any, ...]:
    """What a rule's answers depend on: the op's type, attributes, operands' and results' shapes
    and dtypes, and which operand slots hold one tensor (a model repeats its layers' ops)."""
    slots: dict[int, int] = {}
    return (op.type, repr(op.attrs), repr(op.extra),
            tuple((t.shape, t.dtype, slots.setdefault(id(t), k))
                  for k, t in enumerate(op.inputs)),
            tuple((t.shape, t.dtype) for t in op.outputs))


_STRATEGIES: dict[tuple[Any, ...], tuple[Strategy, ...]] = {}


def strategies(op: Op, mesh: ProcessMesh, pending: Pending = ()) -> tuple[Strategy, ...]:
    """Every candidate of ``op`` on ``mesh``: replicated first, then the rule's strategies,
    those that take as they are the pending sums in ``pending`` (per operand slot: what its
    producer may make) included (memoised per signature, mesh and pending sums)."""
    key = (signature(op), mesh, pending)
    hit = _STRATEGIES.get(key)
    if hit is None:
        if len(_STRATEGIES) >= MEMO_SIZE:  # a process planning many models keeps the newest
            del _STRATEGIES[next(iter(_STRATEGIES))]
        hit = _STRATEGIES[key] = _strategies(op, mesh, pending)
    return hit


def _strategies(op: Op, mesh: ProcessMesh, pending: Pending) -> tuple[Strategy, ...]:
    if not op.inputs:  # a constant is made in whatever layout its consumers read
        return tuple(Strategy((), outs, 1) for outs in itertools.product(
            *(layouts_of(t, mesh) for t in op.outputs)))
    rep = tuple(DistAttr.replicated(mesh, len(t.shape)) for t in op.inputs)
    found: dict[tuple[tuple[DistAttr, ...], tuple[DistAttr, ...]], None] = {}
    base = answer(op, mesh, rep)
    if base is not None and base[0] == rep:
        found[base] = None
    _combinations(op, mesh, found, pending)
    if not found and base is not None and _even(op, *base):
        found[base] = None  # a rule that moves even replicated operands: its own answer
    return tuple(Strategy(ins, outs, _split(mesh, outs)) for ins, outs in found)


def _combinations(op: Op, mesh: ProcessMesh,
                  found: dict[tuple[tuple[DistAttr, ...], tuple[DistAttr, ...]], None],
                  pending: Pending) -> None:
    """Add to ``found`` the products of the single-dim strategies over the mesh dims that the
    rule takes as they are, evenly split, up to ``MAX_CANDIDATES``."""
    splits = [single_dim(op, mesh, m) for m in range(mesh.ndim)]
    _products(op, mesh, found, [[None, *ss] for ss in splits], MAX_CANDIDATES)
    if pending:  # then those with a pending sum, which the splits' never crowd out
        sums = [[s for s in single_dim(op, mesh, m, pending) if s not in ss]
                for m, ss in enumerate(splits)]
        if any(sums):
            _products(op, mesh, found, [[None, *ss, *ps] for ss, ps in zip(splits, sums,
                                                                          strict=True)],
                      len(found) + MAX_CANDIDATES)


def _products(op: Op, mesh: ProcessMesh,
              found: dict[tuple[tuple[DistAttr, ...], tuple[DistAttr, ...]], None],
              per_dim: list[list[tuple[DistAttr, ...] | None]], cap: int) -> None:
    for combo in itertools.product(*per_dim):
        parts = [c for c in combo if c is not None]
        if not parts:
            continue
        given = _merge(mesh, parts)
        if not all(_valid(a) for a in given):
            continue
        got = answer(op, mesh, given)
        if got is None or got[0] != given or not _even(op, *got):
            continue
        found[got] = None
        if len(found) >= cap:
            return


def _valid(a: DistAttr) -> bool:
    seen = [m for ms in a.multi_dims_mapping for m in ms] + [m for m, _ in a.partial_items]
    return len(seen) == len(set(seen))


def layouts_of(t: Tensor, mesh: ProcessMesh) -> tuple[DistAttr, ...]:
    """The layouts a source tensor (an input or a parameter) may be fed in: replicated, and
    each evenly dividing split of its dims over distinct mesh dims."""
    out: dict[DistAttr, None] = {}
    dims = range(mesh.ndim)
    for assign in itertools.product(range(-1, len(t.shape)), repeat=mesh.ndim):
        mdm: list[tuple[int, ...]] = [()] * len(t.shape)
        for m, d in zip(dims, assign, strict=True):
            if d >= 0:
                mdm[d] = (*mdm[d], m)
        a = DistAttr._make(mesh, tuple(mdm), ())
        if divisible(a, t.shape):
            out[a] = None
    return tuple(out)
