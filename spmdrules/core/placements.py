"""The placements view: one Shard / Replicate / Partial per mesh dim (Paddle's and DTensor's way)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

REDUCE_TYPES: Final = ("sum", "avg", "max", "min", "product", "any", "all")


@dataclass(frozen=True, slots=True)
class Shard:
    """The mesh dim splits tensor dim ``dim``.

    ``order`` ranks the mesh dims that co-shard one tensor dim: 0 is the major (outermost) split.
    """

    dim: int
    order: int = 0

    def __repr__(self) -> str:
        return f"Shard({self.dim})" if self.order == 0 else f"Shard({self.dim}, order={self.order})"


@dataclass(frozen=True, slots=True)
class Replicate:
    """Every process along the mesh dim holds the same data."""

    def __repr__(self) -> str:
        return "Replicate()"


@dataclass(frozen=True, slots=True)
class Partial:
    """Processes along the mesh dim hold values still to be combined by ``reduce_type``."""

    reduce_type: str = "sum"

    def __repr__(self) -> str:
        return "Partial()" if self.reduce_type == "sum" else f"Partial({self.reduce_type!r})"


Placement = Shard | Replicate | Partial
