"""The alpha-beta cost model shared by completion (conflicts) and reshard planning (plans).

A step of ``s`` latency rounds that sends ``b`` bytes per process along mesh dim ``m`` costs
``alpha[m] * s + beta[m] * b`` seconds. Each mesh dim may have its own (alpha, beta): in a 2x4
mesh (dp, mp) on a GPU cluster the mp dim is usually inside a node (fast links) and dp across
nodes (``GPU_CLUSTER``). Point-to-point transfers between meshes (pipeline stages) have their own
pair.

The default model (``DEFAULT_COST_MODEL``) is calibrated from MPI measurements of the machine
class spmdrules runs on (``calibration.json`` next to this module, written by
``bench/calibrate.py --write``): collectives on every mesh dim cost the all-reduce fit, transfers
between meshes the ping-pong fit. Processes of one machine share memory, so every mesh dim has
the same links there.

Completion and planning both call ``CostModel.step_time``, so the side of a conflict that
completion keeps is always the one whose plan the planner finds cheaper.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from spmdrules.core.errors import SpmdError
from spmdrules.core.mesh import ProcessMesh


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


#: order-of-magnitude links of a GPU cluster: mp inside a node, everything else between nodes
GPU_CLUSTER: Final = CostModel(default=INTER_NODE, per_dim={"mp": INTRA_NODE}, p2p=INTER_NODE)

#: the measured links of the default model (see bench/calibrate.py)
CALIBRATION_FILE: Final = Path(__file__).with_name("calibration.json")


@dataclass(frozen=True, slots=True)
class Calibration:
    """Links measured with MPI on one machine: ``collective`` from all-reduce timings (the
    planner's steps are collectives), ``p2p`` from ping-pong timings, and where they came from."""

    collective: LinkCost
    p2p: LinkCost
    machine: str
    mpi: str
    date: str
    command: str

    @property
    def cost_model(self) -> CostModel:
        return CostModel(default=self.collective, p2p=self.p2p)


def load_calibration(path: Path = CALIBRATION_FILE) -> Calibration:
    """Read a calibration written by ``bench/calibrate.py --write``."""
    try:
        data: Any = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CostModelError(f"cannot read the cost calibration {path}: {e}; rerun "
                             "`python bench/calibrate.py --write`") from e

    def link(key: str) -> LinkCost:
        entry = data.get(key) if isinstance(data, dict) else None
        if not isinstance(entry, dict) or set(entry) != {"alpha", "beta"}:
            raise CostModelError(f"cost calibration {path}: {key!r} must be an object with "
                                 f"'alpha' and 'beta', got {entry!r}")
        return LinkCost(alpha=entry["alpha"], beta=entry["beta"])

    texts = {}
    for key in ("machine", "mpi", "date", "command"):
        v = data.get(key) if isinstance(data, dict) else None
        if not isinstance(v, str):
            raise CostModelError(f"cost calibration {path}: {key!r} must be a string, got {v!r}")
        texts[key] = v
    return Calibration(collective=link("collective"), p2p=link("p2p"), **texts)


#: the calibration behind the default model
CALIBRATION: Final = load_calibration()
#: the model used when none is given: this machine class's measured links on every mesh dim
DEFAULT_COST_MODEL: Final = CALIBRATION.cost_model
