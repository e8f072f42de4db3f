"""ProcessMesh: process ids laid out in an N-d array whose dims may be named."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from spmdrules.core.errors import InvalidMeshError


def _is_nested(v: Any) -> bool:
    return isinstance(v, list | tuple | np.ndarray)


def _shape_and_ids(nested: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if not _is_nested(nested):
        raise InvalidMeshError(
            f"ProcessMesh: mesh must be a nested list of process ids, got {type(nested).__name__}; "
            "pass e.g. [[0, 1], [2, 3]]"
        )
    if len(nested) == 0:
        raise InvalidMeshError("ProcessMesh: mesh is empty; give at least one process id")
    if _is_nested(nested[0]):
        shapes_ids = [_shape_and_ids(sub) for sub in nested]
        inner = shapes_ids[0][0]
        for i, (shp, _) in enumerate(shapes_ids):
            if shp != inner:
                raise InvalidMeshError(
                    f"ProcessMesh: ragged mesh, row {i} has shape {list(shp)} but row 0 has "
                    f"{list(inner)}; every row of a mesh dim must have the same length"
                )
        ids = tuple(pid for _, sub in shapes_ids for pid in sub)
        return (len(nested), *inner), ids
    ids_list: list[int] = []
    for v in nested:
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise InvalidMeshError(f"ProcessMesh: process id {v!r} is not an integer")
        ids_list.append(int(v))
    return (len(nested),), tuple(ids_list)


class ProcessMesh:
    """An N-d array of process ids. Immutable and hashable; compares by value.

    >>> mesh = ProcessMesh([[0, 1, 2], [3, 4, 5]], dim_names=["dp", "mp"])
    >>> mesh.shape, mesh.process_ids
    ((2, 3), (0, 1, 2, 3, 4, 5))
    >>> mesh.dim_size("mp")
    3
    """

    __slots__ = ("_dim_names", "_hash", "_ids", "_shape")

    _shape: tuple[int, ...]
    _ids: tuple[int, ...]
    _dim_names: tuple[str, ...]
    _hash: int

    def __init__(self, mesh: Any, dim_names: Sequence[str] | None = None) -> None:
        shape, ids = _shape_and_ids(mesh)
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise InvalidMeshError(
                f"ProcessMesh: process ids {dup} appear more than once; each process has one place"
            )
        if any(i < 0 for i in ids):
            raise InvalidMeshError("ProcessMesh: process ids must be >= 0")
        if dim_names is None:
            names = tuple(f"d{i}" for i in range(len(shape)))
        else:
            names = tuple(dim_names)
            if len(names) != len(shape):
                raise InvalidMeshError(
                    f"ProcessMesh: {len(names)} dim_names {list(names)} for a {len(shape)}-d mesh "
                    f"of shape {list(shape)}; give one name per mesh dim"
                )
            if len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
                raise InvalidMeshError(
                    f"ProcessMesh: dim_names {list(names)} must be distinct non-empty strings"
                )
        object.__setattr__(self, "_shape", shape)
        object.__setattr__(self, "_ids", ids)
        object.__setattr__(self, "_dim_names", names)
        object.__setattr__(self, "_hash", hash((shape, ids, names)))

    @classmethod
    def from_shape(
        cls,
        shape: Sequence[int],
        process_ids: Sequence[int] | None = None,
        dim_names: Sequence[str] | None = None,
    ) -> ProcessMesh:
        """Build a mesh from its shape and row-major ids (default ``0..n-1``)."""
        n = int(np.prod(shape)) if len(shape) else 0
        ids = list(range(n)) if process_ids is None else list(process_ids)
        if len(ids) != n or any(s <= 0 for s in shape):
            raise InvalidMeshError(
                f"ProcessMesh: shape {list(shape)} holds {n} processes but {len(ids)} ids were given"
            )
        return cls(np.asarray(ids, dtype=np.int64).reshape(tuple(shape)).tolist(), dim_names)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("ProcessMesh is immutable")

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        return len(self._ids)

    @property
    def process_ids(self) -> tuple[int, ...]:
        return self._ids

    @property
    def dim_names(self) -> tuple[str, ...]:
        return self._dim_names

    def dim_index(self, dim: int | str) -> int:
        """The index of a mesh dim given by index or by name."""
        if isinstance(dim, str):
            try:
                return self._dim_names.index(dim)
            except ValueError:
                raise InvalidMeshError(
                    f"ProcessMesh: no mesh dim is named {dim!r}; the names are "
                    f"{list(self._dim_names)}"
                ) from None
        if isinstance(dim, bool) or not isinstance(dim, int) or not -self.ndim <= dim < self.ndim:
            raise InvalidMeshError(
                f"ProcessMesh: mesh dim {dim!r} is out of range for a {self.ndim}-d mesh"
            )
        return dim % self.ndim

    def dim_size(self, dim: int | str) -> int:
        return self._shape[self.dim_index(dim)]

    def coords(self, process_id: int) -> tuple[int, ...]:
        """Cartesian coordinates of a process on this mesh."""
        try:
            flat = self._ids.index(process_id)
        except ValueError:
            raise InvalidMeshError(
                f"ProcessMesh: process {process_id} is not on this mesh"
            ) from None
        out = []
        for s in reversed(self._shape):
            out.append(flat % s)
            flat //= s
        return tuple(reversed(out))

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, ProcessMesh):
            return NotImplemented
        return (
            self._hash == other._hash
            and self._shape == other._shape
            and self._ids == other._ids
            and self._dim_names == other._dim_names
        )

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        nested = np.asarray(self._ids).reshape(self._shape).tolist()
        return (ProcessMesh, (nested, list(self._dim_names)))

    def __repr__(self) -> str:
        names = ", ".join(f"{n}={s}" for n, s in zip(self._dim_names, self._shape, strict=True))
        ids = self._ids
        if len(ids) > 16:  # an error message names the mesh: keep it one readable line
            if tuple(ids) == tuple(range(ids[0], ids[0] + len(ids))):
                return f"ProcessMesh({names}; ids={ids[0]}..{ids[-1]})"
            shown = ", ".join(map(str, ids[:8]))
            return f"ProcessMesh({names}; ids=[{shown}, ... ({len(ids) - 10} more) ..., " \
                   f"{ids[-2]}, {ids[-1]}])"
        return f"ProcessMesh({names}; ids={list(ids)})"
