"""The annotation API: ``shard(tensor, mesh, spec)``, with open and closed dims and priorities.

A spec takes the form its user already knows:

* placements per mesh dim, as Paddle and DTensor write it: ``[Shard(0), Replicate()]``
  (``Partial()`` entries make the tensor partial on that mesh dim);
* a dims_mapping, one mesh dim index per tensor dim: ``[0, -1]``;
* mesh-dim names per tensor dim, as JAX's PartitionSpec writes it: ``("dp", None)``, with a
  tuple entry ``("dp", "mp")`` to co-shard one tensor dim over several mesh dims (major first);
* a ready ``DistAttr``.

An entry ``OPEN`` (or ``...``) leaves that tensor dim for completion to decide, like Shardy's
open dims. Every other dim is closed: completion must keep it as given. ``closed=False`` makes
the given mappings hints instead (open dims seeded with a preference), and ``closed=[0]`` closes
only the listed dims. ``partial={"mp": "sum"}`` marks pending reductions.

Priorities: a higher ``priority`` wins a conflict during completion. Every annotation made here
is a user annotation: completion writes ``Tensor.attr`` but never ``Tensor.annotation``, and a
closed dim is never changed.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from spmdrules.core.attr import DistAttr
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.placements import REDUCE_TYPES, Partial, Replicate, Shard
from spmdrules.graph.annotation import OPEN, Annotation, DimSpec
from spmdrules.graph.errors import (
    InvalidSpecError,
    MeshDimReusedError,
    SpecRankError,
    UnknownMeshDimError,
)
from spmdrules.graph.nodes import Tensor


def shard(
    tensor: Tensor,
    mesh: ProcessMesh,
    spec: Any = None,
    *,
    partial: Any = None,
    priority: int = 0,
    closed: bool | Iterable[int] = True,
    source: str = "",
) -> Tensor:
    """Annotate ``tensor`` with how it is split over ``mesh``; returns the tensor.

    ``spec=None`` leaves every dim open (it only places the tensor on the mesh). Calling
    ``shard`` again on the same tensor replaces its annotation. ``source`` says who asked for
    it (``spmdrules.plan`` names its plan entry); ``explain`` repeats it.

    >>> from spmdrules.graph.graph import Graph
    >>> mesh = ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
    >>> with Graph() as g:
    ...     x = shard(g.input("x", [8, 1024]), mesh, ("dp", OPEN))
    >>> x.annotation
    Annotation(('dp', ?), priority=0)
    """
    if not isinstance(tensor, Tensor):
        raise InvalidSpecError(
            f"shard: the first argument must be a graph Tensor handle, got {type(tensor).__name__}"
        )
    where = f"shard({tensor.name!r})"
    if not isinstance(mesh, ProcessMesh):
        raise InvalidSpecError(f"{where}: mesh must be a ProcessMesh, got {type(mesh).__name__}")
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidSpecError(f"{where}: priority must be an int (higher wins), got {priority!r}")
    dims, spec_partial, explicit = _parse_spec(where, tensor, mesh, spec)
    _check_splittable(where, tensor, mesh, dims)
    part = _merge_partial(where, mesh, spec_partial, _parse_partial(where, mesh, partial))
    _check_reuse(where, tensor, mesh, dims, part)
    closed_flags = _closed_flags(where, tensor, dims, explicit, closed)
    if not isinstance(source, str):
        raise InvalidSpecError(f"{where}: source must be a str, got {source!r}")
    ann = Annotation(mesh, dims, closed_flags, tuple(part.items()), priority, source)
    tensor.annotation = ann
    tensor.attr = ann.attr
    return tensor


def _mesh_dim(where: str, mesh: ProcessMesh, d: Any, tdim: int) -> int:
    at = f"tensor dim {tdim}" if tdim >= 0 else "partial"
    if isinstance(d, str):
        if d not in mesh.dim_names:
            close = difflib.get_close_matches(d, list(mesh.dim_names), n=2, cutoff=0.4)
            hint = f"did you mean {', '.join(map(repr, close))}? " if close else ""
            raise UnknownMeshDimError(
                f"{where}: {at} names mesh dim {d!r}, which the mesh does not have; {hint}"
                f"the mesh dims are {list(mesh.dim_names)}"
            )
        return mesh.dim_names.index(d)
    if isinstance(d, bool) or not hasattr(d, "__index__"):
        raise InvalidSpecError(
            f"{where}: {at} entry {d!r} is not a mesh dim; use a mesh-dim name, an index, None "
            "(replicated) or OPEN"
        )
    i = int(d)
    if not 0 <= i < mesh.ndim:
        raise UnknownMeshDimError(
            f"{where}: {at} uses mesh dim {i}, out of range for the {mesh.ndim}-d mesh "
            f"{list(mesh.dim_names)}; use 0..{mesh.ndim - 1}, or -1 to replicate"
        )
    return i


def _parse_spec(
    where: str, tensor: Tensor, mesh: ProcessMesh, spec: Any
) -> tuple[list[DimSpec], dict[int, str], list[bool]]:
    """(per-dim mapping or None for open, partials from the spec, which dims the spec fixed)."""
    nd = tensor.ndim
    if spec is None:
        return [None] * nd, {}, [False] * nd
    if isinstance(spec, DistAttr):
        return _from_dist_attr(where, tensor, mesh, spec)
    if isinstance(spec, str | bytes | Mapping) or not isinstance(spec, Iterable):
        raise InvalidSpecError(
            f"{where}: spec {spec!r} is not a list; write placements [Shard(0), Replicate()], a "
            "dims_mapping [0, -1] or mesh-dim names ('dp', None)"
        )
    entries = list(spec)
    is_pl = [isinstance(e, Shard | Replicate | Partial) for e in entries]
    if entries and all(is_pl):
        return _from_placements(where, tensor, mesh, entries)
    if any(is_pl):
        raise InvalidSpecError(
            f"{where}: spec {entries!r} mixes placements with per-dim entries; use placements "
            "(one per mesh dim) or per-dim entries (one per tensor dim), and partial=... for "
            "pending reductions"
        )
    if len(entries) != nd:
        raise SpecRankError(
            f"{where}: spec {entries!r} has {len(entries)} entries but tensor {tensor.name!r} "
            f"{list(tensor.shape)} has rank {nd}; give one entry per tensor dim (None or -1 to "
            "replicate, OPEN to leave it open)"
        )
    per_dim = [_dim_entry(where, mesh, e, i) for i, e in enumerate(entries)]
    return [d for d, _ in per_dim], {}, [fixed for _, fixed in per_dim]


def _from_dist_attr(where: str, tensor: Tensor, mesh: ProcessMesh, spec: DistAttr
                    ) -> tuple[list[DimSpec], dict[int, str], list[bool]]:
    if spec.mesh != mesh:
        raise InvalidSpecError(
            f"{where}: the DistAttr is on {spec.mesh!r}, not on the given mesh {mesh!r}; "
            "pass the attribute's own mesh"
        )
    if spec.ndim != tensor.ndim:
        raise SpecRankError(
            f"{where}: the DistAttr {spec.mapping_str()} has {spec.ndim} dims but tensor "
            f"{tensor.name!r} {list(tensor.shape)} has rank {tensor.ndim}; give one entry per "
            "tensor dim"
        )
    return list(spec.multi_dims_mapping), dict(spec.partial_items), [True] * tensor.ndim


def _dim_entry(where: str, mesh: ProcessMesh, e: Any, i: int) -> tuple[DimSpec, bool]:
    """Tensor dim ``i``'s entry of a per-dim spec: its mesh dims (None: open), and whether the
    spec fixed it."""
    if e is OPEN or e is Ellipsis:
        return None, False
    if e is None or (isinstance(e, int) and not isinstance(e, bool) and e == -1):
        return (), True
    if isinstance(e, tuple | list):
        ms = tuple(_mesh_dim(where, mesh, d, i) for d in e)
        if len(set(ms)) != len(ms):
            raise MeshDimReusedError(
                f"{where}: tensor dim {i} lists a mesh dim twice in {e!r}; "
                "list each mesh dim once"
            )
        return ms, True
    return (_mesh_dim(where, mesh, e, i),), True


def _check_splittable(where: str, tensor: Tensor, mesh: ProcessMesh,
                      dims: Sequence[DimSpec]) -> None:
    """A dim of size 1 has nothing to split: no reshard plan reaches such a layout."""
    for i, ds in enumerate(dims):
        if ds and tensor.shape[i] == 1 and any(mesh.shape[d] > 1 for d in ds):
            names = [mesh.dim_names[d] for d in ds]
            raise InvalidSpecError(
                f"{where}: tensor dim {i} of {tensor.name!r} {list(tensor.shape)} has size 1, "
                f"which cannot be split over mesh dims {names}; replicate it (None) or leave it "
                "OPEN")


def _from_placements(
    where: str, tensor: Tensor, mesh: ProcessMesh, entries: list[Any]
) -> tuple[list[DimSpec], dict[int, str], list[bool]]:
    nd = tensor.ndim
    if len(entries) != mesh.ndim:
        raise SpecRankError(
            f"{where}: {len(entries)} placements for the {mesh.ndim}-d mesh "
            f"{list(mesh.dim_names)}; give one placement per mesh dim"
        )
    per_dim: list[list[tuple[int, int]]] = [[] for _ in range(nd)]
    part: dict[int, str] = {}
    for md, p in enumerate(entries):
        if isinstance(p, Shard):
            d = p.dim + nd if p.dim < 0 else p.dim
            if not 0 <= d < nd:
                raise SpecRankError(
                    f"{where}: Shard({p.dim}) on mesh dim {mesh.dim_names[md]!r} names a tensor "
                    f"dim that tensor {tensor.name!r} {list(tensor.shape)} of rank {nd} does not "
                    f"have; use Shard(0..{nd - 1})"
                )
            per_dim[d].append((p.order, md))
        elif isinstance(p, Partial):
            part[md] = p.reduce_type
    dims: list[DimSpec] = [tuple(md for _, md in sorted(e)) for e in per_dim]
    return dims, part, [True] * nd


def _parse_partial(where: str, mesh: ProcessMesh, partial: Any) -> dict[int, str]:
    if partial is None:
        return {}
    items: Iterable[tuple[Any, Any]]
    if isinstance(partial, Mapping):
        items = partial.items()
    elif isinstance(partial, str | int) and not isinstance(partial, bool):
        items = [(partial, "sum")]
    elif isinstance(partial, Iterable):
        items = [(d, "sum") for d in partial]
    else:
        raise InvalidSpecError(
            f"{where}: partial must be {{mesh_dim: reduce_type}}, a list of mesh dims or one mesh "
            f"dim, got {partial!r}"
        )
    out: dict[int, str] = {}
    for d, rt in items:
        md = _mesh_dim(where, mesh, d, -1)
        if isinstance(rt, Partial):
            rt = rt.reduce_type
        if rt not in REDUCE_TYPES:
            raise InvalidSpecError(
                f"{where}: partial reduce type {rt!r} on mesh dim {mesh.dim_names[md]!r} is not "
                f"one of {list(REDUCE_TYPES)}"
            )
        out[md] = rt
    return out


def _merge_partial(
    where: str, mesh: ProcessMesh, a: dict[int, str], b: dict[int, str]
) -> dict[int, str]:
    out = dict(a)
    for md, rt in b.items():
        if out.get(md, rt) != rt:
            raise InvalidSpecError(
                f"{where}: mesh dim {mesh.dim_names[md]!r} is Partial({out[md]!r}) in the spec "
                f"but {rt!r} in partial=; give one reduce type"
            )
        out[md] = rt
    return dict(sorted(out.items()))


def _check_reuse(
    where: str, tensor: Tensor, mesh: ProcessMesh, dims: list[DimSpec], part: dict[int, str]
) -> None:
    used: dict[int, int] = {}
    for i, ms in enumerate(dims):
        for md in ms or ():
            if md in used:
                raise MeshDimReusedError(
                    f"{where}: mesh dim {mesh.dim_names[md]!r} splits both tensor dim {used[md]} "
                    f"and tensor dim {i} of {tensor.name!r}; a mesh dim splits one tensor dim "
                    "only, so replicate one of them (or co-shard one dim with a tuple)"
                )
            used[md] = i
    for md in part:
        if md in used:
            raise MeshDimReusedError(
                f"{where}: mesh dim {mesh.dim_names[md]!r} is partial but also splits tensor dim "
                f"{used[md]} of {tensor.name!r}; a mesh dim is a split, a replica or a pending "
                "reduction, so drop one of them"
            )


def _closed_flags(
    where: str, tensor: Tensor, dims: list[DimSpec], explicit: list[bool], closed: Any
) -> list[bool]:
    nd = tensor.ndim
    if isinstance(closed, bool):
        return [closed and e for e in explicit]
    if isinstance(closed, str) or not isinstance(closed, Iterable):
        raise InvalidSpecError(
            f"{where}: closed must be a bool or a list of tensor dims, got {closed!r}"
        )
    chosen: set[int] = set()
    for c in closed:
        if isinstance(c, bool) or not isinstance(c, int) or not -nd <= c < nd:
            raise InvalidSpecError(
                f"{where}: closed lists {c!r}, not a tensor dim of {tensor.name!r} (rank {nd}); "
                f"use 0..{nd - 1}"
            )
        d = c % nd
        if dims[d] is None:
            raise InvalidSpecError(
                f"{where}: tensor dim {d} is OPEN in the spec but listed in closed; give it a "
                "mapping to close it, or leave it out of closed"
            )
        chosen.add(d)
    return [i in chosen for i in range(nd)]
