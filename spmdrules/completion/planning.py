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
``slice``          R -> S(d)             0 (each process keeps its piece)
``zero_partial``   R -> P                0 (one replica keeps the value, the rest the identity)
``p2p``            mesh A -> mesh B      the receiver's local block (pipeline stages)
=================  ====================  ==================================================

A shard joins a tensor dim that is already split as its minor (innermost) co-shard, and leaves
it from there (the co-shard transitions); reordering co-shards goes through these steps. A plan
is a shortest path over these states (networkx Dijkstra), weighted by the alpha-beta
``CostModel`` that completion also uses. Every plan also reports ``lower_bound_bytes``: what any
plan must move, counted per process from the blocks it needs and does not hold.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal

import networkx as nx
import numpy as np

from spmdrules.completion.cost import DEFAULT_COST_MODEL, CostModel
from spmdrules.core.attr import DistAttr, MultiDims, PartialItems
from spmdrules.core.errors import SpmdError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.graph.shapes.shape_rule import DTYPE_BYTES

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

    def __str__(self) -> str:
        where = "p2p" if self.mesh_dim is None else self.src.mesh.dim_names[self.mesh_dim]
        return (f"{self.kind.replace('_', '-')}({where}) {self.src.mapping_str()} -> "
                f"{self.dst.mapping_str()}: {fmt_bytes(self.bytes_per_process)}/process, "
                f"{fmt_bytes(self.total_bytes)} total")


@dataclass(frozen=True, slots=True)
class Plan:
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


# ---- blocks ------------------------------------------------------------------------------------
def _pieces(attr: DistAttr, dim: int) -> int:
    n = 1
    for m in attr.multi_dims_mapping[dim]:
        n *= attr.mesh.shape[m]
    return n


def local_numel(attr: DistAttr, shape: tuple[int, ...]) -> int:
    """Elements of the largest local block (a balanced split rounds up)."""
    n = 1
    for d, size in enumerate(shape):
        p = _pieces(attr, d)
        n *= -(-size // p)
    return n


def divisible(attr: DistAttr, shape: tuple[int, ...]) -> bool:
    return all(size % _pieces(attr, d) == 0 for d, size in enumerate(shape))


def blocks(attr: DistAttr, shape: tuple[int, ...]) -> dict[int, tuple[tuple[int, int], ...]]:
    """Each process's block of the global tensor: ``(start, stop)`` per dim (balanced split)."""
    mesh = attr.mesh
    out: dict[int, tuple[tuple[int, int], ...]] = {}
    for flat, pid in enumerate(mesh.process_ids):
        coords = _coords(mesh, flat)
        blk = []
        for d, size in enumerate(shape):
            idx, parts = 0, 1
            for m in attr.multi_dims_mapping[d]:
                idx = idx * mesh.shape[m] + coords[m]
                parts *= mesh.shape[m]
            q, r = divmod(size, parts)
            lo = q * idx + min(idx, r)
            blk.append((lo, lo + q + (1 if idx < r else 0)))
        out[pid] = tuple(blk)
    return out


def _coords(mesh: ProcessMesh, flat: int) -> tuple[int, ...]:
    out = []
    for s in reversed(mesh.shape):
        out.append(flat % s)
        flat //= s
    return tuple(reversed(out))


def _volume(b: tuple[tuple[int, int], ...]) -> int:
    n = 1
    for lo, hi in b:
        n *= max(0, hi - lo)
    return n


def _overlap(a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]) -> int:
    n = 1
    for (alo, ahi), (blo, bhi) in zip(a, b, strict=True):
        n *= max(0, min(ahi, bhi) - max(alo, blo))
    return n


def lower_bound_bytes(src: DistAttr, dst: DistAttr, shape: tuple[int, ...], dtype: str) -> int:
    """Bytes that every plan must deliver, summed over the receiving processes.

    A process needs the part of its destination block that its source block does not hold. If a
    pending reduction must be resolved (a partial of ``src`` over a mesh dim of size > 1 that
    ``dst`` does not keep), it needs at least one value per element of its destination block:
    the others' contributions, however they were combined on the way.
    """
    item = DTYPE_BYTES[dtype]
    kept = set(dst.partial_items) if dst.mesh == src.mesh else set()
    must_reduce = any(src.mesh.shape[m] > 1 and (m, rt) not in kept for m, rt in src.partial_items)
    if dst.mesh == src.mesh:
        # in closed form over the mesh dims the mappings use, not process by process: a mesh of
        # a million processes costs what its used dims' coordinates cost
        total = _held_total(dst, shape)
        return (total if must_reduce else total - _overlap_total(src, dst, shape)) * item
    sb = blocks(src, shape)
    total = 0
    for pid, db in blocks(dst, shape).items():
        have = sb.get(pid)
        if must_reduce or have is None:
            total += _volume(db)
        else:
            total += _volume(db) - _overlap(db, have)
    return total * item


def _group_overlap(order: list[int], dims: list[int], shape: tuple[int, ...], sm: MultiDims,
                   dm: MultiDims, mesh_shape: tuple[int, ...], exact: type) -> int:
    """``_overlap_total`` of one group, over the grid of its mesh dims' coordinates at once
    (``exact``: int64, or ``object`` for Python ints when a product could overflow int64)."""
    grid: Any = np.indices([mesh_shape[m] for m in order], dtype=np.int64).astype(exact)
    at = {m: grid[k] for k, m in enumerate(order)}

    def bounds(size: int, ms: tuple[int, ...]) -> tuple[Any, Any]:
        # balanced_range over the whole grid (as ``blocks`` does process by process)
        idx: Any = np.zeros(grid.shape[1:], dtype=exact)
        parts = 1
        for m in ms:
            idx = idx * mesh_shape[m] + at[m]
            parts *= mesh_shape[m]
        q, r = divmod(size, parts)
        lo = q * idx + np.minimum(idx, r)
        return lo, lo + q + (idx < r)

    prod: Any = np.ones(grid.shape[1:], dtype=exact)
    for d in dims:
        slo, shi = bounds(shape[d], sm[d])
        dlo, dhi = bounds(shape[d], dm[d])
        prod = prod * np.maximum(0, np.minimum(shi, dhi) - np.maximum(slo, dlo))
    return int(prod.sum(dtype=exact))


def _held_total(attr: DistAttr, shape: tuple[int, ...]) -> int:
    """The elements every process holds, summed: each element once per process replicating it."""
    n = 1
    for s in shape:
        n *= s
    used = {m for ms in attr.multi_dims_mapping for m in ms}
    for m, size in enumerate(attr.mesh.shape):
        if m not in used:
            n *= size
    return n


def _overlap_total(src: DistAttr, dst: DistAttr, shape: tuple[int, ...]) -> int:
    """Sum over the processes of the overlap of their source and destination blocks. Tensor dims
    whose mappings share no mesh dim contribute independent factors, so the sum runs, per group
    of dims linked by their mesh dims, over those mesh dims' coordinates only."""
    mesh_shape = src.mesh.shape
    sm, dm = src.multi_dims_mapping, dst.multi_dims_mapping
    links = nx.Graph()  # tensor dims ("d", i) linked through the mesh dims ("m", j) they use
    links.add_nodes_from(("d", d) for d in range(len(shape)))
    links.add_edges_from((("d", d), ("m", m)) for d in range(len(shape)) for m in {*sm[d], *dm[d]})
    numel = 1
    for n in shape:
        numel *= n
    exact: type = np.int64 if numel < (1 << 62) else object
    total = 1
    for m, size in enumerate(mesh_shape):
        if ("m", m) not in links:
            total *= size
    for group in nx.connected_components(links):
        dims = [i for kind, i in group if kind == "d"]
        order = sorted(i for kind, i in group if kind == "m")
        total *= _group_overlap(order, dims, shape, sm, dm, mesh_shape, exact)
    return total


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
    [1, 64, 55, 55] tensor split on H and W, one mesh dim at a time).
    ``partial_types`` are the reduce types ``zero_partial`` may create (the destination's)."""
    mesh = attr.mesh
    item = DTYPE_BYTES[dtype]
    mdm, part = attr.multi_dims_mapping, attr.partial_items
    local = local_numel(attr, shape) * item
    out: list[Step] = []

    uneven_src = not divisible(attr, shape)

    def add(kind: StepKind, m: int, new: DistAttr, rounds: int, per_proc: float) -> None:
        joins = kind == "all_gather" and uneven_src
        if new != attr and (new in keep or joins or divisible(new, shape)):
            b = round(per_proc)
            out.append(Step(kind, m, attr, new, b, b * mesh.size,
                            cost.step_time(mesh, m, rounds, b)))

    for m, n in enumerate(mesh.shape):
        pl = _placement(attr, m)
        if pl[0] == "P":
            rest = tuple(x for x in part if x[0] != m)
            add("all_reduce", m, _with(attr, mdm, rest), 2 * (n - 1), 2 * (n - 1) / n * local)
            for new in _insertions(mdm, m):
                add("reduce_scatter", m, _with(attr, new, rest), n - 1, (n - 1) / n * local)
        elif pl[0] == "R":
            for new in _insertions(mdm, m):
                add("slice", m, _with(attr, new, part), 0, 0.0)
            for rt in sorted(partial_types):
                add("zero_partial", m, _with(attr, mdm, (*part, (m, rt))), 0, 0.0)
        elif pl[2] == len(mdm[pl[1]]) - 1:  # only the minor split gathers (or moves) in one step
            gathered = _with(attr, _remove(mdm, m), part)
            after = local_numel(gathered, shape) * item
            add("all_gather", m, gathered, n - 1, (n - 1) / n * after)
            d = pl[1]
            for new in _insertions(_remove(mdm, m), m):
                moved = next(i for i, ms in enumerate(new) if m in ms)
                if moved != d:
                    add("all_to_all", m, _with(attr, new, part), n - 1, (n - 1) / n * local)
    return out


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


@functools.lru_cache(maxsize=4096)
def plan_reshard(
    src: DistAttr,
    dst: DistAttr,
    shape: tuple[int, ...],
    dtype: str = "float32",
    cost: CostModel = DEFAULT_COST_MODEL,
) -> Plan:
    """The cheapest plan from ``src`` to ``dst`` (memoised: models repeat the same reshards).

    >>> mesh = ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
    >>> p = plan_reshard(DistAttr(mesh, [0, -1], {1: "sum"}), DistAttr(mesh, [0, -1]), (8, 1024))
    >>> [s.kind for s in p.steps], p.total_bytes, p.lower_bound_bytes
    (['all_reduce'], 196608, 131072)
    """
    shape = tuple(shape)
    for a, what in ((src, "source"), (dst, "destination")):
        if a.ndim != len(shape):
            raise ReshardError(
                f"plan_reshard: the {what} attribute {a.mapping_str()} has {a.ndim} dims but the "
                f"tensor shape {list(shape)} has {len(shape)}; give one entry per tensor dim"
            )
    lb = lower_bound_bytes(src, dst, shape, dtype)
    if src == dst:
        return Plan(src, dst, shape, dtype, (), 0.0, 0, 0, lb)
    g = nx.DiGraph()
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
            for s in steps:
                w = s.time + _STEP_EPS
                old = g.get_edge_data(a, s.dst)
                if old is None or old["w"] > w:
                    g.add_edge(a, s.dst, w=w, step=s)
                if s.dst not in seen:
                    seen.add(s.dst)
                    nxt.append(s.dst)
        frontier = nxt
    if dst not in seen:
        raise ReshardError(
            f"plan_reshard: no plan takes {src.mapping_str()} on {src.mesh!r} to "
            f"{dst.mapping_str()} on {dst.mesh!r} for shape {list(shape)}; the destination "
            "cannot be reached through evenly split states"
        )
    path = nx.shortest_path(g, src, dst, weight="w")
    steps_t = tuple(g.edges[u, v]["step"] for u, v in itertools.pairwise(path))
    return Plan(
        src, dst, shape, dtype, steps_t,
        time=sum(s.time for s in steps_t),
        total_bytes=sum(s.total_bytes for s in steps_t),
        bytes_per_process=sum(s.bytes_per_process for s in steps_t),
        lower_bound_bytes=lb,
    )


def reshard_time(
    src: DistAttr, dst: DistAttr, shape: tuple[int, ...], dtype: str, cost: CostModel
) -> float:
    """Seconds of the cheapest plan: what completion compares when it settles a conflict."""
    if src == dst:
        return 0.0
    return plan_reshard(src, dst, shape, dtype, cost).time
