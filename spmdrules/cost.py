"""The alpha-beta cost model shared by completion (conflicts) and reshard planning (plans).

A step of ``s`` latency rounds that sends ``b`` bytes per process along mesh dim ``m`` costs
``alpha[m] * s + beta[m] * b`` seconds. Each mesh dim has its own (alpha, beta): in a 2x4 mesh
(dp, mp) the mp dim is usually inside a node (fast links) and dp across nodes. Point-to-point
transfers between meshes (pipeline stages) have their own pair. A later issue calibrates the
numbers from MPI measurements; the defaults below are order-of-magnitude values for a GPU cluster
(NVLink-class inside a node, 100 Gb/s-class between nodes).

Completion and planning both call ``CostModel.step_time``, so the side of a conflict that
completion keeps is always the one whose plan the planner finds cheaper.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

from spmdrules.errors import SpmdError
from spmdrules.mesh import ProcessMesh


class CostModelError(SpmdError, ValueError):
    """A cost-model parameter that is negative, unknown or not a number."""


@dataclass(frozen=True, slots=True)
class LinkCost:
    """One link class: ``alpha`` seconds per latency round, ``beta`` seconds per byte."""

    alpha: float
    beta: float

    def __post_init__(self) -> None:
        for name in ("alpha", "beta"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not v >= 0:
                raise CostModelError(f"LinkCost: {name} must be a number >= 0, got {v!r}")

    def time(self, rounds: int, nbytes: float) -> float:
        return self.alpha * rounds + self.beta * nbytes


#: inside a node (NVLink-class, ~100 GB/s, ~5 us per round)
INTRA_NODE: Final = LinkCost(alpha=5e-6, beta=1e-11)
#: between nodes (~12.5 GB/s, ~20 us per round)
INTER_NODE: Final = LinkCost(alpha=2e-5, beta=8e-11)


@dataclass(frozen=True, slots=True)
class CostModel:
    """Per-mesh-dim link costs, keyed by mesh-dim name or index, with a default for the rest.

    >>> cm = CostModel(per_dim={"mp": INTRA_NODE})
    >>> mesh = ProcessMesh([[0, 1, 2, 3], [4, 5, 6, 7]], dim_names=["dp", "mp"])
    >>> cm.link(mesh, 1) == INTRA_NODE, cm.link(mesh, 0) == cm.default
    (True, True)
    """

    default: LinkCost = INTER_NODE
    per_dim: Mapping[str | int, LinkCost] = field(default_factory=dict)
    p2p: LinkCost = INTER_NODE

    def __post_init__(self) -> None:
        # A frozen dataclass with a dict field is not hashable; freeze it as sorted items so the
        # planner can memoise plans per cost model.
        items = tuple(sorted(((str(k), v) for k, v in dict(self.per_dim).items())))
        for k, v in items:
            if not isinstance(v, LinkCost):
                raise CostModelError(f"CostModel: per_dim[{k!r}] must be a LinkCost, got {v!r}")
        object.__setattr__(self, "per_dim", _FrozenMap(items))

    def link(self, mesh: ProcessMesh, mesh_dim: int) -> LinkCost:
        """The link of ``mesh_dim``: by name first, then by index, else the default."""
        pd = self.per_dim
        name = mesh.dim_names[mesh_dim]
        hit = pd.get(name)
        if hit is None:
            hit = pd.get(str(mesh_dim))
        return self.default if hit is None else hit

    def step_time(self, mesh: ProcessMesh, mesh_dim: int | None, rounds: int, nbytes: float) -> float:
        """Seconds for one step; ``mesh_dim=None`` is a point-to-point transfer between meshes."""
        link = self.p2p if mesh_dim is None else self.link(mesh, mesh_dim)
        return link.time(rounds, nbytes)


class _FrozenMap(Mapping[str | int, LinkCost]):
    """A hashable read-only mapping (so CostModel hashes and can key a cache)."""

    __slots__ = ("_d", "_items")

    def __init__(self, items: tuple[tuple[str, LinkCost], ...]) -> None:
        self._items = items
        self._d = dict(items)

    def __getitem__(self, k: str | int) -> LinkCost:
        return self._d[str(k)]

    def get(self, k: str | int, default: object = None) -> LinkCost | None:  # type: ignore[override]
        return self._d.get(str(k))

    def __iter__(self) -> Iterator[str | int]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _FrozenMap):
            return self._items == other._items
        return NotImplemented

    def __repr__(self) -> str:
        return repr(dict(self._items))


#: the model used when none is given: mp inside a node, everything else between nodes
DEFAULT_COST_MODEL: Final = CostModel(per_dim={"mp": INTRA_NODE})
