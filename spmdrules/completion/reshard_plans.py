"""Reshard plans: the cheapest sequence of collective steps from one attribute to another.

The states are the attributes a tensor can have (one placement per mesh dim: replicated, partial,
or a shard of a tensor dim at a position among that dim's co-shards). Each step changes one mesh
dim:

=================  ====================  ==================================================
step               placement change      bytes sent per process (ring algorithms, group n)
=================  ====================  ==================================================
``all_reduce``     P -> R                2(n-1)/n x local block
``reduce_scatter`` P -> S(d)             (n-1)/n x local block
``all_gather``     S(d) -> R             (n-1)/n x local block after the gather
``all_to_all``     S(i) -> S(j)          (n-1)/n x local block
``slice``          R -> S(d)             0 (each process keeps its piece; may split over
                                         several mesh dims at once)
``zero_partial``   R -> P                0 (one replica keeps the value, the rest the identity)
``p2p``            mesh A -> mesh B      the receiver's local block (pipeline stages); on one
                                         mesh, out of an uneven co-shard: a box exchange,
                                         bytes counted exactly
=================  ====================  ==================================================

A shard joins a tensor dim that is already split as its minor (innermost) co-shard, and leaves
it from there (the co-shard transitions); reordering co-shards goes through these steps. Such a
step moves data by the nested decomposition (each block split again), so it is taken only where
that is the layout's flat balanced one (``nested_is_flat``); an uneven co-shard that one mesh dim
at a time cannot reach exactly is reached by one local slice over several mesh dims. A plan
is a shortest path over these states (networkx Dijkstra), weighted by the alpha-beta
``CostModel`` that completion also uses. Every plan also reports ``lower_bound_bytes``: what any
plan must move, counted per process from the blocks it needs and does not hold.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from spmdrules.completion.cost import DEFAULT_COST_MODEL, CostModel
from spmdrules.completion.local_shards import divisible as divisible
from spmdrules.completion.local_shards import fits as fits
from spmdrules.completion.local_shards import fitting as fitting
from spmdrules.completion.local_shards import (
    held_total,
    nested_is_flat,
    overlap_total,
    repartition_elements,
)
from spmdrules.completion.local_shards import local_numel as local_numel
from spmdrules.completion.local_shards import lower_bound_bytes as lower_bound_bytes
from spmdrules.completion.local_shards import shard_boxes as shard_boxes
from spmdrules.core.attr import DistAttr, MultiDims, PartialItems
from spmdrules.core.errors import SpmdError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.graph.shapes.shape_rule import DTYPE_BYTES

if TYPE_CHECKING:  # networkx loads with the first plan, not in every MPI rank that only runs one
    import networkx as nx

StepKind = Literal[
    "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "slice", "zero_partial", "p2p"
]

# Dijkstra breaks ties between equal-time paths arbitrarily; a tiny per-step charge makes it
# prefer the plan with fewer steps (e.g. one slice rather than slice + all-to-all) without ever
# outweighing a real difference in time.
_STEP_EPS: Final = 1e-15


class ReshardError(SpmdError, ValueError):
    """No plan exists between two attributes (or they do not fit the tensor)."""


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a plan: a collective (or local op, or transfer) on one mesh dim."""

    kind: StepKind
    mesh_dim: int | None  # None for a point-to-point transfer between meshes
    src: DistAttr
    dst: DistAttr
    bytes_per_process: int
    total_bytes: int
    time: float

    @property
    def mesh_dims(self) -> tuple[int, ...]:
        """The mesh dims the step works over: a slice may split over several at once (onto an
        uneven co-shard that one mesh dim at a time would not reach, see ``nested_is_flat``)."""
        if self.kind == "slice":
            before = {m for ms in self.src.multi_dims_mapping for m in ms}
            return tuple(m for ms in self.dst.multi_dims_mapping for m in ms if m not in before)
        return () if self.mesh_dim is None else (self.mesh_dim,)

    @property
    def where(self) -> str:
        """The step's mesh dims by name (``p2p`` for a transfer between meshes)."""
        if self.mesh_dim is None:  # between meshes, or a repartition over the whole mesh
            return "p2p" if self.src.mesh != self.dst.mesh else "all"
        return ",".join(self.src.mesh.dim_names[m] for m in self.mesh_dims)

    def __str__(self) -> str:
        return (f"{self.kind.replace('_', '-')}({self.where}) {self.src.mapping_str()} -> "
                f"{self.dst.mapping_str()}: {fmt_bytes(self.bytes_per_process)}/process, "
                f"{fmt_bytes(self.total_bytes)} total")


@dataclass(frozen=True, slots=True)
class ReshardPlan:
    """The cheapest steps from ``src`` to ``dst`` for a tensor of ``shape`` and ``dtype``."""

    src: DistAttr
    dst: DistAttr
    shape: tuple[int, ...]
    dtype: str
    steps: tuple[Step, ...]
    time: float
    total_bytes: int
    bytes_per_process: int  # the largest per-process send summed over steps
    lower_bound_bytes: int

    def __str__(self) -> str:
        head = (f"{self.src.mapping_str()} -> {self.dst.mapping_str()}: "
                f"{fmt_bytes(self.total_bytes)} total (lower bound "
                f"{fmt_bytes(self.lower_bound_bytes)}), {self.time * 1e6:.1f} us")
        if not self.steps:
            return head + " (nothing to do)"
        return head + "".join(f"\n  {s}" for s in self.steps)


def fmt_bytes(n: float) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


# ---- transitions -------------------------------------------------------------------------------
def _placement(attr: DistAttr, m: int) -> tuple[str, int, int, str]:
    """(kind R/P/S, tensor dim, co-shard position, reduce type) of mesh dim ``m``."""
    for d, ms in enumerate(attr.multi_dims_mapping):
        if m in ms:
            return ("S", d, ms.index(m), "")
    for pm, rt in attr.partial_items:
        if pm == m:
            return ("P", -1, -1, rt)
    return ("R", -1, -1, "")


def _with(
    attr: DistAttr, mdm: MultiDims, partial: PartialItems, mesh: ProcessMesh | None = None
) -> DistAttr:
    return DistAttr._make(mesh or attr.mesh, mdm, tuple(sorted(partial)))


def _insertions(mdm: MultiDims, m: int) -> Iterator[MultiDims]:
    """Every way to add mesh dim ``m`` as the minor (innermost) split of some tensor dim.

    Only the minor position keeps each new piece inside the block a process already holds (or
    holds a partial of), so only there is a slice local and a reduce-scatter one collective.
    """
    for d, ms in enumerate(mdm):
        yield (*mdm[:d], (*ms, m), *mdm[d + 1 :])


def _remove(mdm: MultiDims, m: int) -> MultiDims:
    return tuple(tuple(x for x in ms if x != m) for ms in mdm)


def transitions(
    attr: DistAttr,
    shape: tuple[int, ...],
    dtype: str,
    cost: CostModel = DEFAULT_COST_MODEL,
    partial_types: frozenset[str] = frozenset(),
    keep: frozenset[DistAttr] = frozenset(),
) -> list[Step]:
    """Every single same-mesh step from ``attr``. Intermediate states must split evenly; states
    in ``keep`` (a plan's source and destination) are allowed even when they do not, and so is
    what an all-gather leaves of an unevenly split state (it only joins blocks: gathering a
    [1, 64, 55, 55] tensor split on H and W, one mesh dim at a time). A step whose nested
    blocks are not the flat ones is left out (``nested_is_flat``); a slice over several mesh
    dims reaches a ``keep`` state those would have reached.
    ``partial_types`` are the reduce types ``zero_partial`` may create (the destination's)."""
    mesh = attr.mesh
    item = DTYPE_BYTES[dtype]
    mdm, part = attr.multi_dims_mapping, attr.partial_items
    local = local_numel(attr, shape) * item
    out: list[Step] = []

    def refines(d: int, ms: tuple[int, ...], m: int) -> bool:
        """Adding (or removing) mesh dim ``m`` as the minor split of dim ``d``, whose other
        splits are ``ms``, keeps the nested blocks the flat ones."""
        outer = 1
        for x in ms:
            outer *= mesh.shape[x]
        return nested_is_flat(shape[d], outer, mesh.shape[m])

    def total(kind: StepKind, n: int, new: DistAttr, b: int) -> int:
        """The step's bytes summed over the processes, as the ring and the box exchange move
        them: exact also where the blocks differ in size (``b * mesh.size`` is exact only
        where every process sends the same)."""
        if kind in ("all_reduce", "reduce_scatter"):  # each of n chunks once per ring round
            rounds = 2 * (n - 1) if kind == "all_reduce" else n - 1
            return rounds * held_total(attr, shape) // n * item
        if kind in ("all_gather", "all_to_all") and not (
                divisible(attr, shape) and divisible(new, shape)):
            return (held_total(new, shape) - overlap_total(attr, new, shape)) * item
        return b * mesh.size

    # an all-gather only joins blocks, so it may leave an uneven state (refines() holds)
    uneven_src = not divisible(attr, shape)

    def add(kind: StepKind, m: int, new: DistAttr, rounds: int, per_proc: float) -> None:
        joins = kind == "all_gather" and uneven_src
        if new != attr and (new in keep or joins or divisible(new, shape)):
            b = round(per_proc)
            out.append(Step(kind, m, attr, new, b, total(kind, mesh.shape[m], new, b),
                            cost.step_time(mesh, m, rounds, b)))

    for m, n in enumerate(mesh.shape):
        pl = _placement(attr, m)
        if pl[0] == "P":
            rest = tuple(x for x in part if x[0] != m)
            add("all_reduce", m, _with(attr, mdm, rest), 2 * (n - 1), 2 * (n - 1) / n * local)
            for d, new in enumerate(_insertions(mdm, m)):
                if refines(d, mdm[d], m):
                    add("reduce_scatter", m, _with(attr, new, rest), n - 1, (n - 1) / n * local)
        elif pl[0] == "R":
            for d, new in enumerate(_insertions(mdm, m)):
                if refines(d, mdm[d], m):
                    add("slice", m, _with(attr, new, part), 0, 0.0)
            for rt in sorted(partial_types):
                add("zero_partial", m, _with(attr, mdm, (*part, (m, rt))), 0, 0.0)
        elif pl[2] == len(mdm[pl[1]]) - 1:  # only the minor split gathers (or moves) in one step
            d = pl[1]
            rest_mdm = _remove(mdm, m)
            if not refines(d, rest_mdm[d], m):
                continue  # the group's blocks do not make up the gathered block
            gathered = _with(attr, rest_mdm, part)
            after = local_numel(gathered, shape) * item
            add("all_gather", m, gathered, n - 1, (n - 1) / n * after)
            for e, new in enumerate(_insertions(rest_mdm, m)):
                if e != d and refines(e, rest_mdm[e], m):
                    add("all_to_all", m, _with(attr, new, part), n - 1, (n - 1) / n * local)
    for t in keep:
        s = _slice_onto(attr, t, shape, cost)
        if s is not None and s.dst not in {o.dst for o in out}:
            out.append(s)
    return out


def _slice_onto(attr: DistAttr, t: DistAttr, shape: tuple[int, ...], cost: CostModel
                ) -> Step | None:
    """One local slice from ``attr`` straight onto ``t`` (a plan's source or destination) over
    several mesh dims at once, when ``t`` only splits further, by mesh dims ``attr`` replicates,
    and each dim's new blocks lie inside its old ones. This is the route to an uneven co-shard
    that one mesh dim at a time would reach only through nested blocks (6 over a then b of a
    2 x 2 mesh gives (2, 1, 2, 1), not the layout's (2, 2, 1, 1)); single-dim slices are
    ``transitions``' own."""
    if t.mesh != attr.mesh or t.partial_items != attr.partial_items or t == attr:
        return None
    mesh = attr.mesh
    used = {m for ms in attr.multi_dims_mapping for m in ms} | {m for m, _ in attr.partial_items}
    added: list[int] = []
    for d, (ms, ts) in enumerate(zip(attr.multi_dims_mapping, t.multi_dims_mapping, strict=True)):
        if ts[: len(ms)] != ms or used & set(ts[len(ms):]):
            return None
        new = ts[len(ms):]
        added += new
        outer = math.prod(mesh.shape[m] for m in ms)
        if not nested_is_flat(shape[d], outer, math.prod(mesh.shape[m] for m in new)):
            return None
    if len(added) < 2:
        return None
    return Step("slice", added[0], attr, t, 0, 0, cost.step_time(mesh, added[0], 0, 0))


def _p2p_steps(
    attr: DistAttr, dst: DistAttr, shape: tuple[int, ...], dtype: str, cost: CostModel
) -> list[Step]:
    """Transfers from ``attr`` (on the source mesh) to the destination mesh.

    Between meshes of one shape each process sends its block to its counterpart, partial or not.
    Otherwise a transfer needs settled values, and goes straight to the destination's mapping
    (its partial dropped) or to replicated; slices on the destination mesh do the rest.
    """
    item = DTYPE_BYTES[dtype]
    targets: list[DistAttr] = []
    if attr.mesh.shape == dst.mesh.shape:
        targets.append(_with(attr, attr.multi_dims_mapping, attr.partial_items, dst.mesh))
    if not attr.partial_items:
        targets.append(dst.without_partial())
        targets.append(DistAttr.replicated(dst.mesh, len(shape)))
    out: list[Step] = []
    for t in dict.fromkeys(targets):
        b = local_numel(t, shape) * item
        out.append(Step("p2p", None, attr, t, b, b * t.mesh.size,
                        cost.step_time(t.mesh, None, 1, b)))
    return out


def _repartition_steps(
    attr: DistAttr, dst: DistAttr, shape: tuple[int, ...], dtype: str, cost: CostModel
) -> list[Step]:
    """Out of an uneven source on one mesh: a box exchange (the runtime's Repartition) straight
    to the destination's mapping (its partial dropped) or to replicated, as between meshes. The
    one-mesh-dim gathers leave an uneven co-shard only where its nested blocks are its flat
    ones; a repartition reads the flat blocks whatever they are. Bytes counted exactly."""
    if attr.partial_items:
        return []
    item = DTYPE_BYTES[dtype]
    out: list[Step] = []
    for t in dict.fromkeys((dst.without_partial(), DistAttr.replicated(dst.mesh, len(shape)))):
        if t == attr:
            continue
        most, total = repartition_elements(attr, t, shape)
        out.append(Step("p2p", None, attr, t, most * item, total * item,
                        cost.step_time(t.mesh, None, 1, most * item)))
    return out


@functools.lru_cache(maxsize=4096)
def plan_reshard(
    src: DistAttr,
    dst: DistAttr,
    shape: tuple[int, ...],
    dtype: str = "float32",
    cost: CostModel = DEFAULT_COST_MODEL,
) -> ReshardPlan:
    """The cheapest plan from ``src`` to ``dst`` (memoised: models repeat the same reshards).

    >>> mesh = ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
    >>> p = plan_reshard(DistAttr(mesh, [0, -1], {1: "sum"}), DistAttr(mesh, [0, -1]), (8, 1024))
    >>> [s.kind for s in p.steps], p.total_bytes, p.lower_bound_bytes
    (['all_reduce'], 196608, 131072)
    """
    shape = tuple(shape)
    if src.mask_items or dst.mask_items:
        return _masked_plan(src, dst, shape, dtype, cost)
    for a, what in ((src, "source"), (dst, "destination")):
        if a.ndim != len(shape):
            raise ReshardError(
                f"plan_reshard: the {what} attribute {a.mapping_str()} has {a.ndim} dims but the "
                f"tensor shape {list(shape)} has {len(shape)}; give one entry per tensor dim"
            )
    lb = lower_bound_bytes(src, dst, shape, dtype)
    if src == dst:
        return ReshardPlan(src, dst, shape, dtype, (), 0.0, 0, 0, lb)
    g, seen = _state_graph(src, dst, shape, dtype, cost)
    if dst not in seen:
        raise ReshardError(
            f"plan_reshard: no plan takes {src.mapping_str()} on {src.mesh!r} to "
            f"{dst.mapping_str()} on {dst.mesh!r} for shape {list(shape)}; the destination "
            "cannot be reached through evenly split states"
        )
    import networkx as nx

    path = nx.shortest_path(g, src, dst, weight="w")
    steps_t = tuple(g.edges[u, v]["step"] for u, v in itertools.pairwise(path))
    return ReshardPlan(
        src, dst, shape, dtype, steps_t,
        time=sum(s.time for s in steps_t),
        total_bytes=sum(s.total_bytes for s in steps_t),
        bytes_per_process=sum(s.bytes_per_process for s in steps_t),
        lower_bound_bytes=lb,
    )


def _state_graph(src: DistAttr, dst: DistAttr, shape: tuple[int, ...], dtype: str,
                 cost: CostModel) -> tuple[nx.DiGraph[DistAttr], set[DistAttr]]:
    """The layouts a plan from ``src`` towards ``dst`` can pass through, breadth first: each
    edge the cheapest step between two of them (weight ``w``, the step ``step``); and the
    layouts reached."""
    import networkx as nx

    g: nx.DiGraph[DistAttr] = nx.DiGraph()
    keep = frozenset((src, dst))
    rts = frozenset(rt for _, rt in dst.partial_items)
    cross = src.mesh != dst.mesh
    seen = {src}
    frontier = [src]
    while frontier:
        nxt: list[DistAttr] = []
        for a in frontier:
            steps = transitions(a, shape, dtype, cost, rts if a.mesh == dst.mesh else frozenset(),
                                keep)
            if cross and a.mesh == src.mesh:
                steps += _p2p_steps(a, dst, shape, dtype, cost)
            elif a == src and not divisible(src, shape):
                steps += _repartition_steps(src, dst, shape, dtype, cost)
            for s in steps:
                w = s.time + _STEP_EPS
                old = g.get_edge_data(a, s.dst)
                if old is None or old["w"] > w:
                    g.add_edge(a, s.dst, w=w, step=s)
                if s.dst not in seen:
                    seen.add(s.dst)
                    nxt.append(s.dst)
        frontier = nxt
    return g, seen


def _masked_plan(src: DistAttr, dst: DistAttr, shape: tuple[int, ...], dtype: str,
                 cost: CostModel) -> ReshardPlan:
    """A reshard of a masked pending sum (``spmdrules.engine.masks``): its data is the plain
    sum's, so the plain sums' plan moves it, and dropping a mask is free. A mask is made only by
    the op that computes the sum: no reshard can make one, nor move one to another dim."""
    extra = set(dst.mask_items) - set(src.mask_items)
    if extra:
        m, d = min(extra)
        raise ReshardError(
            f"plan_reshard: {dst.mapping_str()} asks for a pending sum on mesh dim {m} masked by "
            f"tensor dim {d}, which {src.mapping_str()} is not; only the op that computes a "
            "masked sum (a lookup) makes one: ask for the plain sum instead"
        )
    plan = plan_reshard(src.without_masks(), dst.without_masks(), shape, dtype, cost)
    return dataclasses.replace(plan, src=src, dst=dst)


def reshard_time(
    src: DistAttr, dst: DistAttr, shape: tuple[int, ...], dtype: str, cost: CostModel
) -> float:
    """Seconds of the cheapest plan: what completion compares when it settles a conflict.
    Infinite when no plan reaches ``dst`` or ``dst`` leaves a process an empty block (what a
    careless annotation asks for): completion then prefers any choice that plans, and never
    raises while choosing."""
    if src == dst:
        return 0.0
    if not fits(dst, shape):
        return math.inf  # completion never lays a tensor out so
    try:
        return plan_reshard(src, dst, shape, dtype, cost).time
    except ReshardError:
        return math.inf
