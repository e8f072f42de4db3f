"""DistAttr: how one tensor is laid out on a ProcessMesh.

The canonical form is ``multi_dims_mapping`` (a tuple of mesh dims per tensor dim, major first), which
also says co-sharding exactly; ``dims_mapping`` is the flat view and the placements view is the same
information indexed by mesh dim.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from spmdrules.core.errors import CoShardedDimError, InvalidDistAttrError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.placements import REDUCE_TYPES, Partial, Placement, Replicate, Shard

MultiDims = tuple[tuple[int, ...], ...]
PartialItems = tuple[tuple[int, str], ...]
#: (mesh dim, tensor dim) pairs: the pending sum on the mesh dim is *masked* by the tensor dim
#: (module docs of spmdrules.engine.masks)
MaskItems = tuple[tuple[int, int], ...]


def _mesh_dim(mesh: ProcessMesh, d: Any, where: str) -> int:
    if isinstance(d, str):
        if d not in mesh.dim_names:
            raise InvalidDistAttrError(
                f"{where}: mesh dim {d!r} is not a dim name of the mesh {list(mesh.dim_names)}"
            )
        return mesh.dim_names.index(d)
    if isinstance(d, bool) or not isinstance(d, int):
        try:
            import numpy as np

            if isinstance(d, np.integer):
                d = int(d)
            else:
                raise TypeError
        except TypeError:
            raise InvalidDistAttrError(f"{where}: mesh dim {d!r} is not an int") from None
    if not 0 <= d < mesh.ndim:
        raise InvalidDistAttrError(
            f"{where}: mesh dim {d} is out of range for the {mesh.ndim}-d mesh of shape "
            f"{list(mesh.shape)}; use 0..{mesh.ndim - 1}, or -1 to replicate"
        )
    return int(d)


def _from_dims_mapping(mesh: ProcessMesh, dims_mapping: Any, where: str) -> MultiDims:
    """A dims_mapping (a mesh dim, its name, or -1/None per tensor dim) as mesh-dim tuples."""
    if isinstance(dims_mapping, str | bytes) or not isinstance(dims_mapping, Iterable):
        raise InvalidDistAttrError(f"{where}: dims_mapping must be a list, got {dims_mapping!r}")
    return tuple(
        () if d is None or (not isinstance(d, str) and not isinstance(d, bool) and d == -1)
        else (_mesh_dim(mesh, d, where),)
        for d in dims_mapping
    )


def _from_multi(mesh: ProcessMesh, multi_dims_mapping: Any, where: str) -> MultiDims:
    """A multi_dims_mapping (mesh dims per tensor dim; a bare int reads as a dims_mapping's)."""
    mdm: list[tuple[int, ...]] = []
    for entry in multi_dims_mapping:
        if isinstance(entry, int) and not isinstance(entry, bool):
            entry = () if entry == -1 else (entry,)
        mdm.append(tuple(_mesh_dim(mesh, d, where) for d in entry))
    return tuple(mdm)


def _sharding_mesh_dims(mdm: MultiDims, where: str) -> dict[int, int]:
    """Mesh dim -> the tensor dim it shards; a mesh dim that shards two is an error."""
    seen: dict[int, int] = {}
    for tdim, dims in enumerate(mdm):
        for d in dims:
            if d in seen:
                raise InvalidDistAttrError(
                    f"{where}: mesh dim {d} shards both tensor dim {seen[d]} and tensor dim "
                    f"{tdim}; a mesh dim can split one tensor dim only. Set one of them to -1"
                )
            seen[d] = tdim
    return seen


def _normalise_partial(mesh: ProcessMesh, partial: Any, where: str) -> PartialItems:
    if partial is None:
        return ()
    items: Iterable[tuple[Any, Any]]
    if isinstance(partial, Mapping):
        items = partial.items()
    elif isinstance(partial, Iterable) and not isinstance(partial, str):
        items = ((d, "sum") for d in partial)
    else:
        raise InvalidDistAttrError(
            f"{where}: partial must be a dict {{mesh_dim: reduce_type}} or a list of mesh dims, "
            f"got {partial!r}"
        )
    out: dict[int, str] = {}
    for d, rt in items:
        # ASCII digits only: '¹' and '١' are digits to str.isdigit, not to int()
        ascii_int = isinstance(d, str) and d.isascii() and d.isdigit()
        md = _mesh_dim(mesh, int(d) if ascii_int else d, where)
        if isinstance(rt, Partial):
            rt = rt.reduce_type
        if rt not in REDUCE_TYPES:
            raise InvalidDistAttrError(
                f"{where}: reduce type {rt!r} on mesh dim {md} is not one of {list(REDUCE_TYPES)}"
            )
        out[md] = rt
    return tuple(sorted(out.items()))


# Immutable value types set their slots once; bound here to keep construction cheap.
_set = object.__setattr__


class DistAttr:
    """The distributed attribute of one tensor. Immutable, hashable, compares by value.

    >>> mesh = ProcessMesh([[0, 1, 2], [3, 4, 5]], dim_names=["dp", "mp"])
    >>> attr = DistAttr(mesh, dims_mapping=[0, -1], partial={1: "sum"})
    >>> attr.dims_mapping, attr.multi_dims_mapping, attr.partial
    ((0, -1), ((0,), ()), {1: 'sum'})
    >>> attr.placements
    (Shard(0), Partial())
    """

    # Public read-only slots (``__setattr__`` refuses writes): rules read them in their inner loop,
    # where a slot is as cheap as a private one and a property costs a call.
    __slots__ = ("_hash", "mask_items", "mesh", "multi_dims_mapping", "partial_items")

    mesh: ProcessMesh
    #: mesh dims per tensor dim, major first (the canonical form)
    multi_dims_mapping: MultiDims
    #: (mesh dim, reduce type) of the pending reductions, sorted by mesh dim
    partial_items: PartialItems
    #: (mesh dim, tensor dim) of the masked pending sums, sorted by mesh dim
    mask_items: MaskItems
    _hash: int

    def __init__(
        self,
        mesh: ProcessMesh,
        dims_mapping: Sequence[int | str | None] | None = None,
        partial: Mapping[Any, str] | Iterable[int] | None = None,
        *,
        multi_dims_mapping: Sequence[Sequence[int | str]] | None = None,
        masks: Mapping[Any, int] | None = None,
    ) -> None:
        where = "DistAttr"
        if not isinstance(mesh, ProcessMesh):
            raise InvalidDistAttrError(f"{where}: mesh must be a ProcessMesh, got {mesh!r}")
        if (dims_mapping is None) == (multi_dims_mapping is None):
            raise InvalidDistAttrError(
                f"{where}: give exactly one of dims_mapping or multi_dims_mapping"
            )
        mdm = (_from_dims_mapping(mesh, dims_mapping, where) if dims_mapping is not None
               else _from_multi(mesh, multi_dims_mapping, where))
        seen = _sharding_mesh_dims(mdm, where)
        part = _normalise_partial(mesh, partial, where)
        for d, _ in part:
            if d in seen:
                raise InvalidDistAttrError(
                    f"{where}: mesh dim {d} is partial but also shards tensor dim {seen[d]}; a mesh "
                    "dim is either a shard, a replica or a pending reduction. Drop one of them"
                )
        self._init(mesh, mdm, part, _normalise_masks(mesh, masks, part, len(mdm), where))

    def _init(self, mesh: ProcessMesh, mdm: MultiDims, part: PartialItems,
              masks: MaskItems = ()) -> None:
        _set(self, "mesh", mesh)
        _set(self, "multi_dims_mapping", mdm)
        _set(self, "partial_items", part)
        _set(self, "mask_items", masks)
        _set(self, "_hash", -1)

    @classmethod
    def _make(cls, mesh: ProcessMesh, mdm: MultiDims, part: PartialItems = (),
              masks: MaskItems = ()) -> DistAttr:
        """Build without validation: for rules, whose results are valid by construction."""
        self = object.__new__(cls)
        _set(self, "mesh", mesh)
        _set(self, "multi_dims_mapping", mdm)
        _set(self, "partial_items", part)
        _set(self, "mask_items", masks)
        # Rules build many attributes that are never hashed: hash lazily.
        _set(self, "_hash", -1)
        return self

    @classmethod
    def replicated(cls, mesh: ProcessMesh, ndim: int) -> DistAttr:
        return cls._make(mesh, ((),) * ndim, ())

    @classmethod
    def from_placements(
        cls, mesh: ProcessMesh, placements: Sequence[Placement], ndim: int
    ) -> DistAttr:
        """Build from one placement per mesh dim.

        >>> mesh = ProcessMesh([[0, 1], [2, 3]])
        >>> DistAttr.from_placements(mesh, [Shard(0), Partial("max")], ndim=2)
        DistAttr(dims_mapping=[0, -1], partial={1: 'max'}, mesh=ProcessMesh(d0=2, d1=2; ids=[0, 1, 2, 3]))
        """
        where = "DistAttr.from_placements"
        if len(placements) != mesh.ndim:
            raise InvalidDistAttrError(
                f"{where}: {len(placements)} placements for a {mesh.ndim}-d mesh; give one per mesh dim"
            )
        per_dim: list[list[tuple[int, int]]] = [[] for _ in range(ndim)]
        partial: dict[int, str] = {}
        for md, p in enumerate(placements):
            if isinstance(p, Shard):
                dim = p.dim + ndim if p.dim < 0 else p.dim
                if not 0 <= dim < ndim:
                    raise InvalidDistAttrError(
                        f"{where}: Shard({p.dim}) on mesh dim {md} is out of range for a {ndim}-d "
                        "tensor"
                    )
                per_dim[dim].append((p.order, md))
            elif isinstance(p, Partial):
                partial[md] = p.reduce_type
            elif not isinstance(p, Replicate):
                raise InvalidDistAttrError(f"{where}: {p!r} on mesh dim {md} is not a placement")
        mdm = [tuple(md for _, md in sorted(entries)) for entries in per_dim]
        return cls(mesh, multi_dims_mapping=mdm, partial=partial)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("DistAttr is immutable; use .replace(...)")

    # ---- views -------------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.multi_dims_mapping)

    @property
    def dims_mapping(self) -> tuple[int, ...]:
        out = []
        for i, dims in enumerate(self.multi_dims_mapping):
            if len(dims) > 1:
                raise CoShardedDimError(
                    f"DistAttr: tensor dim {i} is co-sharded over mesh dims {list(dims)}, which the "
                    "flat dims_mapping cannot say; read multi_dims_mapping instead"
                )
            out.append(dims[0] if dims else -1)
        return tuple(out)

    @property
    def is_co_sharded(self) -> bool:
        return any(len(d) > 1 for d in self.multi_dims_mapping)

    @property
    def partial(self) -> dict[int, str]:
        return dict(self.partial_items)

    @property
    def partial_dims(self) -> frozenset[int]:
        return frozenset(d for d, _ in self.partial_items)

    @property
    def masks(self) -> dict[int, int]:
        """{mesh dim: tensor dim} of the masked pending sums: along that mesh dim, each index of
        that tensor dim is held by one process, and every other holds zeros there."""
        return dict(self.mask_items)

    def without_masks(self) -> DistAttr:
        """The same layout as a plain pending sum (what every rule that knows no masks sees)."""
        if not self.mask_items:
            return self
        return DistAttr._make(self.mesh, self.multi_dims_mapping, self.partial_items)

    def is_partial(self, mesh_dim: int | None = None) -> bool:
        if mesh_dim is None:
            return bool(self.partial_items)
        return any(d == mesh_dim for d, _ in self.partial_items)

    @property
    def is_replicated(self) -> bool:
        return not self.partial_items and not any(self.multi_dims_mapping)

    @property
    def sharded_mesh_dims(self) -> frozenset[int]:
        return frozenset(d for dims in self.multi_dims_mapping for d in dims)

    @property
    def placements(self) -> tuple[Placement, ...]:
        out: list[Placement] = [Replicate()] * self.mesh.ndim
        for tdim, dims in enumerate(self.multi_dims_mapping):
            for order, md in enumerate(dims):
                out[md] = Shard(tdim, order)
        for md, rt in self.partial_items:
            out[md] = Partial(rt)
        return tuple(out)

    def shard_count(self, tensor_dim: int) -> int:
        """How many pieces tensor dim ``tensor_dim`` is cut into."""
        n = 1
        for md in self.multi_dims_mapping[tensor_dim]:
            n *= self.mesh.shape[md]
        return n

    # ---- derived attributes ------------------------------------------------------------------
    def replace(
        self,
        dims_mapping: Sequence[int] | None = None,
        partial: Mapping[Any, str] | Iterable[int] | None = None,
        *,
        multi_dims_mapping: Sequence[Sequence[int]] | None = None,
        keep_partial: bool = True,
    ) -> DistAttr:
        """A validated copy with a new mapping and/or partial status (and no masks: a mask
        depends on the dims, which the copy may move)."""
        if dims_mapping is None and multi_dims_mapping is None:
            multi_dims_mapping = self.multi_dims_mapping
        if partial is None and keep_partial:
            partial = dict(self.partial_items)
        return DistAttr(self.mesh, dims_mapping, partial, multi_dims_mapping=multi_dims_mapping)

    def without_partial(self) -> DistAttr:
        if not self.partial_items:
            return self
        return DistAttr._make(self.mesh, self.multi_dims_mapping, ())

    # ---- dunder ------------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, DistAttr):
            return NotImplemented
        return (
            self.multi_dims_mapping == other.multi_dims_mapping
            and self.partial_items == other.partial_items
            and self.mask_items == other.mask_items
            and (self.mesh is other.mesh or self.mesh == other.mesh)
        )

    def __hash__(self) -> int:
        h = self._hash
        if h == -1:
            h = hash((self.mesh, self.multi_dims_mapping, self.partial_items, self.mask_items))
            _set(self, "_hash", h)
        return h

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.mesh, self.multi_dims_mapping, self.partial_items, self.mask_items))

    def mapping_str(self) -> str:
        """Compact text: ``[0,-1]`` or ``[[0,1],-1]`` for co-shard, then ``P{1:sum}``."""
        parts = []
        for dims in self.multi_dims_mapping:
            if not dims:
                parts.append("-1")
            elif len(dims) == 1:
                parts.append(str(dims[0]))
            else:
                parts.append("[" + ",".join(map(str, dims)) + "]")
        text = "[" + ",".join(parts) + "]"
        if self.partial_items:
            masks = dict(self.mask_items)
            text += " P{" + ",".join(
                f"{d}:{rt}" + (f" masked by dim {masks[d]}" if d in masks else "")
                for d, rt in self.partial_items) + "}"
        return text

    def __repr__(self) -> str:
        if self.is_co_sharded:
            m = f"multi_dims_mapping={[list(d) for d in self.multi_dims_mapping]}"
        else:
            m = f"dims_mapping={list(self.dims_mapping)}"
        p = f", partial={self.partial}" if self.partial_items else ""
        if self.mask_items:
            p += f", masks={self.masks}"
        return f"DistAttr({m}{p}, mesh={self.mesh!r})"


def _normalise_masks(mesh: ProcessMesh, masks: Mapping[Any, int] | None, part: PartialItems,
                     ndim: int, where: str) -> MaskItems:
    if not masks:
        return ()
    sums = {d for d, rt in part if rt == "sum"}
    out: dict[int, int] = {}
    for d, tdim in masks.items():
        md = _mesh_dim(mesh, d, where)
        if md not in sums:
            raise InvalidDistAttrError(
                f"{where}: mesh dim {md} is masked but not a pending sum; a mask says which "
                f"process holds each slice of a pending sum: add partial={{{md}: 'sum'}} or drop "
                "the mask"
            )
        if isinstance(tdim, bool) or not isinstance(tdim, int) or not 0 <= tdim < ndim:
            raise InvalidDistAttrError(
                f"{where}: the mask on mesh dim {md} names tensor dim {tdim!r}; give a dim in "
                f"0..{ndim - 1}"
            )
        out[md] = tdim
    return tuple(sorted(out.items()))


def _rebuild(mesh: ProcessMesh, mdm: MultiDims, part: PartialItems,
             masks: MaskItems = ()) -> DistAttr:
    return DistAttr._make(mesh, mdm, part, masks)
