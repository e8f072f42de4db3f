"""What completion answers: every tensor's attribute and its origin, the offers refused, the reshards,
and the errors it raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import Final, Literal

from spmdrules.completion import rank as ranks
from spmdrules.completion.cost import DEFAULT_COST_MODEL, CostModel
from spmdrules.completion.reshard_plans import ReshardError, ReshardPlan, fmt_bytes, plan_reshard
from spmdrules.core.attr import DistAttr
from spmdrules.graph.errors import GraphError

OfferKind = Literal["forward", "demand", "reverse"]
OriginKind = Literal["annotation", "forward", "demand", "reverse", "default"]


WEAK_RANK: Final = ranks.WEAK  # rank of an offer no known tensor drove (a placeholder's echo)


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
        return None if self.rank == WEAK_RANK else ranks.priority(self.rank)


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

    def plan(self, cost: CostModel = DEFAULT_COST_MODEL) -> ReshardPlan:
        try:
            return plan_reshard(self.src, self.dst, self.shape, self.dtype, cost)
        except ReshardError as e:  # name the edge: the tensor and the op that needs (or makes) it
            side = "needed by" if self.side == "operand" else "made by"
            raise ReshardError(f"tensor {self.tensor!r} {side} op {self.op!r}: {e}") from e

    def __str__(self) -> str:
        arrow = f"-> {self.ops_str}" if self.side == "operand" else f"<- {self.op}"
        return f"{self.tensor} {arrow}: {self.src.mapping_str()} => {self.dst.mapping_str()}"


class DroppedSplitWarning(UserWarning):
    """``complete`` dropped a split: a mesh dim that split an op's operand reaches none of its
    results, though the op's rule keeps it (``Completion.dropped``). One warning per dropped
    split, naming the tensor, the mesh dim, the tensor dim and the reason; filter it by this
    category (``warnings.simplefilter("error", DroppedSplitWarning)`` makes it an error)."""


@dataclass(frozen=True, slots=True)
class DroppedSplit:
    """Mesh dims ``mesh_dims`` (major first), which split dim ``dim`` of ``tensor``, stop at op
    ``op``.

    ``side="result"``: ``op``'s rule makes its result ``tensor`` as ``kept`` and completion lays
    it out as ``got`` (why: ``reason``, as ``explain`` words it). ``side="operand"``: ``op``'s
    rule keeps the split given the operand ``tensor`` (laid out as ``kept``) alone, but needs it
    as ``got`` given its other operands; or, with a ``reason`` starting ``extent``, needs it as
    ``got`` even alone because a result of the op is shorter on that dim than the split's pieces
    (a window op whose output collapses below the mesh)."""

    tensor: str
    op: str
    side: Literal["operand", "result"]
    mesh_dims: tuple[str, ...]
    dim: int
    shape: tuple[int, ...]
    kept: DistAttr
    got: DistAttr
    reason: str

    @property
    def split(self) -> str:
        """The mesh dims, as the messages name them: ``mesh dim 'dp'``, ``mesh dims 'a', 'b'``."""
        names = ", ".join(map(repr, self.mesh_dims))
        return f"mesh dim{'s' if len(self.mesh_dims) > 1 else ''} {names}"

    def __str__(self) -> str:
        where = (f"its rule makes {self.tensor!r} {list(self.shape)} as {self.kept.mapping_str()}"
                 f" and completion lays it out as {self.got.mapping_str()}"
                 if self.side == "result" else
                 f"its rule needs {self.tensor!r} {list(self.shape)} ({self.kept.mapping_str()}) "
                 f"as {self.got.mapping_str()}"
                 if self.reason.startswith("extent") else
                 f"its rule keeps the split given {self.tensor!r} {list(self.shape)} "
                 f"({self.kept.mapping_str()}) alone, and needs it as {self.got.mapping_str()} "
                 "given its other operands")
        return (f"completion drops the split of {self.tensor!r} over {self.split} (tensor dim "
                f"{self.dim}) at op {self.op!r}: {where}, so no result of the op keeps "
                f"{'them' if len(self.mesh_dims) > 1 else 'it'}; why: "
                f"{self.reason or 'no offer was refused'}. {self.fix}")

    @property
    def fix(self) -> str:
        """What keeps the split."""
        if self.reason.startswith("divisibility"):
            # only a split that leaves a process an empty block is dropped (issue 24)
            n = prod(self.kept.mesh.shape[m] for m in self.kept.multi_dims_mapping[self.dim])
            return (f"Dim {self.dim} is {self.shape[self.dim]}, shorter than its {n} pieces: "
                    f"a size of at least {n} keeps the split")
        if self.reason.startswith("extent"):
            n = prod(self.kept.mesh.shape[m] for m in self.kept.multi_dims_mapping[self.dim])
            return (f"A result at least {n} long on dim {self.dim} (a larger input), or a split "
                    "over fewer processes, keeps it")
        return (f"Annotating {self.tensor!r} with the split keeps it; explain(result, "
                f"{self.tensor!r}) shows the offers")


def origin_str(o: Origin) -> str:
    if o.kind == "annotation":
        return "annotation" + (f" ({o.note})" if o.note else "")
    if o.kind == "default":
        return "default (no annotation reaches it)"
    return f"{o.kind} via {o.op}" + (f" from {o.driver}" if o.driver else "")


def reshard_table(planned: Sequence[tuple[ReshardEdge, ReshardPlan | ReshardError]]) -> str:
    """The summary's table: one row per reshard edge with its plan's steps and bytes, or why it
    has no plan."""
    rows = [("tensor", "edge", "from", "to", "steps", "bytes")]
    for e, p in planned:
        edge = f"-> {e.ops_str}" if e.side == "operand" else f"<- {e.op}"
        if isinstance(p, ReshardPlan):
            steps = " + ".join(s.kind.replace("_", "-")
                               + ("" if s.mesh_dim is None else f"({s.where})") for s in p.steps)
            size = fmt_bytes(p.total_bytes)
        else:
            steps, size = "no plan: " + str(p).split(": ", 2)[-1][:80], "-"
        rows.append((e.tensor, edge, e.src.mapping_str(), e.dst.mapping_str(), steps, size))
    return table(rows)


def table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for k, r in enumerate(rows):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)
