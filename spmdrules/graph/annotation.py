"""The Annotation type: a user's annotation of one tensor, with open and closed dims.

It sits apart from ``annotate`` (the ``shard`` API) because the graph's tensors hold annotations
while ``shard`` takes tensors: both import this module, and neither imports the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from spmdrules.core.attr import DistAttr, PartialItems
from spmdrules.core.mesh import ProcessMesh
from spmdrules.graph.errors import InvalidSpecError


class _Open:
    """The OPEN sentinel: this tensor dim is left for completion to decide."""

    _instance: _Open | None = None

    def __new__(cls) -> _Open:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "OPEN"

    def __reduce__(self) -> str:
        return "OPEN"


OPEN: Final = _Open()

DimSpec = tuple[int, ...] | None  # mesh dims (major first); None = no preference (open)


class Annotation:
    """A user annotation of one tensor. Immutable.

    ``dims[i]`` is the mesh dims that split tensor dim i (``()`` = replicated), or None when the
    dim is open with no preference. ``closed[i]`` says whether completion must keep ``dims[i]``.
    ``attr`` is the DistAttr the annotation seeds (open dims replicated).
    """

    __slots__ = (
        "_hash", "_key", "attr", "closed", "dims", "mesh", "partial", "priority", "source",
    )

    mesh: ProcessMesh
    dims: tuple[DimSpec, ...]
    closed: tuple[bool, ...]
    partial: PartialItems
    priority: int
    #: who made it (a plan entry such as ``'*.q_proj': ColwiseParallel()``); "" for a direct
    #: ``shard`` call. Provenance only: not part of the key, so it never changes completion.
    source: str
    attr: DistAttr
    _key: tuple[Any, ...]
    _hash: int

    def __init__(
        self,
        mesh: ProcessMesh,
        dims: Sequence[DimSpec],
        closed: Sequence[bool],
        partial: PartialItems = (),
        priority: int = 0,
        source: str = "",
    ) -> None:
        d = tuple(dims)
        c = tuple(closed)
        if len(c) != len(d) or any(x is None and y for x, y in zip(d, c, strict=True)):
            raise InvalidSpecError("Annotation: an open dim with no mapping cannot be closed")
        object.__setattr__(self, "mesh", mesh)
        object.__setattr__(self, "dims", d)
        object.__setattr__(self, "closed", c)
        object.__setattr__(self, "partial", tuple(sorted(partial)))
        object.__setattr__(self, "priority", priority)
        object.__setattr__(self, "source", source)
        mdm = tuple(() if x is None else x for x in d)
        object.__setattr__(self, "attr", DistAttr._make(mesh, mdm, self.partial))
        # kept: completion compares and interns the annotations of every layer on every run
        key = (mesh, d, c, self.partial, priority)
        object.__setattr__(self, "_key", key)
        object.__setattr__(self, "_hash", hash(key))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Annotation is immutable; call shard(...) again to replace it")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Annotation,
                (self.mesh, self.dims, self.closed, self.partial, self.priority, self.source))

    @property
    def ndim(self) -> int:
        return len(self.dims)

    def is_open(self, dim: int) -> bool:
        return not self.closed[dim]

    @property
    def open_dims(self) -> tuple[int, ...]:
        return tuple(i for i, c in enumerate(self.closed) if not c)

    @property
    def is_fully_closed(self) -> bool:
        return all(self.closed)

    def key(self) -> tuple[Any, ...]:
        return self._key

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Annotation):
            return NotImplemented
        return self is other or self._key == other._key

    def __hash__(self) -> int:
        return self._hash

    def spec_str(self) -> str:
        """JAX-style text with mesh-dim names: ``('dp', None, ?)``; ``?`` marks an open dim."""
        names = self.mesh.dim_names
        parts = []
        for d, c in zip(self.dims, self.closed, strict=True):
            if d is None:
                parts.append("?")
                continue
            text = "None" if not d else (
                repr(names[d[0]]) if len(d) == 1 else "(" + ", ".join(repr(names[m]) for m in d) + ")"
            )
            parts.append(text if c else text + "?")
        return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"

    def __repr__(self) -> str:
        p = ""
        if self.partial:
            p = ", partial={" + ", ".join(f"{self.mesh.dim_names[m]!r}: {r!r}" for m, r in self.partial) + "}"
        return f"Annotation({self.spec_str()}{p}, priority={self.priority})"
