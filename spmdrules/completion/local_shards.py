"""Local blocks of a layout and what any reshard must move: the balanced decomposition of every
process's block (a dim split over mesh dims in mixed radix, the first major, as the runtime
splits it), whether a step that refines a shard keeps those blocks (``nested_is_flat``), and the lower
bound of a plan's bytes (used by :mod:`spmdrules.completion.reshard_plans`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from spmdrules.core.attr import DistAttr, MultiDims
from spmdrules.core.mesh import ProcessMesh
from spmdrules.graph.shapes.shape_rule import DTYPE_BYTES


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


def nested_is_flat(size: int, outer: int, k: int) -> bool:
    """Whether splitting each of the ``outer`` balanced blocks of ``size`` into ``k`` balanced
    pieces gives the balanced split of ``size`` into ``outer * k`` (the flat co-shard a layout
    means). A step that refines or coarsens a shard by a mesh dim of size ``k`` moves data by the
    nested decomposition, so it is exact only then. Otherwise the blocks differ: 6 over 2 then
    over 2 gives (2, 1, 2, 1), the flat split over 4 is (2, 2, 1, 1). With ``r = size % (outer
    * k)`` the two agree exactly when one of ``outer`` and ``k`` is 1 or ``r`` is 0, 1 or
    ``outer * k - 1`` (the spare entries sit where both decompositions put them)."""
    if outer == 1 or k == 1:
        return True
    return size % (outer * k) in (0, 1, outer * k - 1)


def divisible(attr: DistAttr, shape: tuple[int, ...]) -> bool:
    return all(size % _pieces(attr, d) == 0 for d, size in enumerate(shape))


def fits(attr: DistAttr, shape: tuple[int, ...]) -> bool:
    """Whether every process's block is non-empty: each split dim at least as long as its
    pieces. Uneven blocks fit (7 over 2: 4 and 3); 1 over 2 leaves a process nothing."""
    return all(size >= _pieces(attr, d) for d, size in enumerate(shape))


def fitting(attr: DistAttr, shape: tuple[int, ...]) -> DistAttr:
    """``attr`` without the splits that leave a process an empty block (those dims replicated)."""
    if fits(attr, shape):
        return attr
    mdm = tuple(ms if size >= _pieces(attr, d) else ()
                for d, (size, ms) in enumerate(zip(shape, attr.multi_dims_mapping, strict=True)))
    return DistAttr._make(attr.mesh, mdm, attr.partial_items)


def shard_boxes(attr: DistAttr, shape: tuple[int, ...]) -> dict[int, tuple[tuple[int, int], ...]]:
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
        total = held_total(dst, shape)
        return (total if must_reduce else total - overlap_total(src, dst, shape)) * item
    sb = shard_boxes(src, shape)
    total = 0
    for pid, db in shard_boxes(dst, shape).items():
        have = sb.get(pid)
        if must_reduce or have is None:
            total += _volume(db)
        else:
            total += _volume(db) - _overlap(db, have)
    return total * item


def _group_overlap(order: list[int], dims: list[int], shape: tuple[int, ...], sm: MultiDims,
                   dm: MultiDims, mesh_shape: tuple[int, ...], exact: type) -> int:
    """``overlap_total`` of one group, over the grid of its mesh dims' coordinates at once
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


def held_total(attr: DistAttr, shape: tuple[int, ...]) -> int:
    """The elements every process holds, summed: each element once per process replicating it."""
    n = 1
    for s in shape:
        n *= s
    used = {m for ms in attr.multi_dims_mapping for m in ms}
    for m, size in enumerate(attr.mesh.shape):
        if m not in used:
            n *= size
    return n


def overlap_total(src: DistAttr, dst: DistAttr, shape: tuple[int, ...]) -> int:
    """Sum over the processes of the overlap of their source and destination blocks. Tensor dims
    whose mappings share no mesh dim contribute independent factors, so the sum runs, per group
    of dims linked by their mesh dims, over those mesh dims' coordinates only."""
    import networkx as nx  # here, not at the top: an MPI rank that never plans does not load it

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


def repartition_elements(src: DistAttr, dst: DistAttr, shape: tuple[int, ...]) -> tuple[int, int]:
    """(the most any process receives, the sum over processes) in elements, of a box exchange
    from ``src`` to ``dst`` on one mesh with settled values: each distinct block of ``src`` is
    sent from one owner (coordinate 0 along the mesh dims ``src`` replicates over), and a process
    receives the part of its ``dst`` block that it does not own itself. Counted process by
    process: the executors count the same messages."""
    used = {m for ms in src.multi_dims_mapping for m in ms}
    spread = [m for m in range(src.mesh.ndim) if m not in used]
    sb, db = shard_boxes(src, shape), shard_boxes(dst, shape)
    most = total = 0
    for flat, pid in enumerate(src.mesh.process_ids):
        got = _volume(db[pid])
        if not any(_coords(src.mesh, flat)[m] for m in spread):
            got -= _overlap(db[pid], sb[pid])
        most, total = max(most, got), total + got
    return most, total
