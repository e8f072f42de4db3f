"""What completion answers: every tensor's attribute and its origin, the offers refused, the reshards,
and the errors it raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from spmdrules.completion.cost import DEFAULT_COST_MODEL, CostModel
from spmdrules.completion.planning import Plan, ReshardError, plan_reshard
from spmdrules.core.attr import DistAttr
from spmdrules.graph.errors import GraphError

OfferKind = Literal["forward", "demand", "reverse"]
OriginKind = Literal["annotation", "forward", "demand", "reverse", "default"]


RECENT_VISITS: Final = 4
WEAK_RANK: Final = -(1 << 40)  # rank of an offer no known tensor drove (a placeholder's echo)


class CompletionError(GraphError):
    """Completion cannot start or cannot settle a node; the message names the node and the fix."""


class NoAnnotationError(CompletionError):
    """The graph has no annotation, so no tensor has a mesh to start from."""


class UnresolvableConflictError(CompletionError):
    """An op's rule refuses every choice of its operands' attributes."""


@dataclass(frozen=True, slots=True)
class Offer:
    """One attribute an op offered a tensor, with the rank it carried and what drove it."""

    attr: DistAttr
    rank: int
    op: str
    op_order: int
    kind: OfferKind
    driver: str | None  # the tensor whose attribute the op propagated (None: nothing known)


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a tensor's final attribute came from."""

    kind: OriginKind
    op: str | None = None
    driver: str | None = None
    rank: int = WEAK_RANK
    note: str = ""

    @property
    def priority(self) -> int | None:
        return None if self.rank == WEAK_RANK else self.rank >> 1


@dataclass(frozen=True, slots=True)
class Rejected:
    """An offer that lost, and why: priority, annotation, cost, divisibility or rule."""

    offer: Offer
    reason: Literal["priority", "annotation", "cost", "divisibility", "rule"]
    detail: str


@dataclass(frozen=True, slots=True)
class ReshardEdge:
    """Data that must move: ``tensor`` is ``src`` where ``op`` needs (or makes) ``dst``.

    ``side="operand"``: the consumer ``op`` needs the tensor as ``dst``. ``side="result"``: the
    producer ``op`` makes ``src`` and the tensor is ``dst``.

    One reshard serves every consumer that needs the tensor as ``dst``: ``op`` is the first of
    them (in op order) and ``shared`` names the others, so the data moves (and is counted) once
    per tensor and target layout, not once per consumer.
    """

    tensor: str
    op: str
    side: Literal["operand", "result"]
    src: DistAttr
    dst: DistAttr
    shape: tuple[int, ...]
    dtype: str
    #: the position of the operand (result) among the op's flattened operands (results): an op
    #: that takes one tensor twice may need it in two layouts, one edge each
    slot: int = 0
    #: the other consumers reading this reshard's result, as (op, slot), in op order
    shared: tuple[tuple[str, int], ...] = ()

    @property
    def consumers(self) -> tuple[tuple[str, int], ...]:
        """Every (op, slot) reading this reshard's result (the producer's alone for a result
        edge)."""
        return ((self.op, self.slot), *self.shared)

    @property
    def ops_str(self) -> str:
        """``op``, then the ops that share the reshard (``q, k, v``)."""
        return ", ".join(dict.fromkeys(k for k, _ in self.consumers))

    @property
    def cross_mesh(self) -> bool:
        return self.src.mesh != self.dst.mesh

    def plan(self, cost: CostModel = DEFAULT_COST_MODEL) -> Plan:
        try:
            return plan_reshard(self.src, self.dst, self.shape, self.dtype, cost)
        except ReshardError as e:  # name the edge: the tensor and the op that needs (or makes) it
            side = "needed by" if self.side == "operand" else "made by"
            raise ReshardError(f"tensor {self.tensor!r} {side} op {self.op!r}: {e}") from e

    def __str__(self) -> str:
        arrow = f"-> {self.ops_str}" if self.side == "operand" else f"<- {self.op}"
        return f"{self.tensor} {arrow}: {self.src.mapping_str()} => {self.dst.mapping_str()}"


def origin_str(o: Origin) -> str:
    if o.kind == "annotation":
        return "annotation" + (f" ({o.note})" if o.note else "")
    if o.kind == "default":
        return "default (no annotation reaches it)"
    return f"{o.kind} via {o.op}" + (f" from {o.driver}" if o.driver else "")


def table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for k, r in enumerate(rows):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)
