"""The completion pass: every tensor's attribute, from a few annotations and the op rules.

Propagation. Every op offers attributes to its tensors: its forward rule offers each result the
attribute the op produces (``forward``) and each operand the attribute the op needs given its
other operands (``demand``); its reverse rule offers each operand the attribute that produces the
results' current attributes (``reverse``). Each tensor keeps every offer and takes the best one.
Ops are visited over a worklist in alternating sweeps (forward in topological order, reverse in
the opposite order); an op is visited again only when one of its tensors changed, so on a model
whose annotations agree, each op's rules run once or twice.

Policy (``docs/completion.md``). A tensor takes, in order:

1. its annotation's closed dims, always (user annotations are never overwritten);
2. the offer of highest *rank*: an annotation of priority p has rank 2p+1, and an inferred offer
   inherits 2p from the highest-priority tensor that drove it (so higher priority wins, and an
   annotation beats an inference of its own priority);
3. among offers of equal rank, the one whose reshards on the tensor's edges cost least under the
   ``CostModel`` (the one the planner uses, so both always agree);
4. then the producer's offer, then consumers in topological order.

Offers that do not split evenly are refused (divisibility). When an op's rule refuses its operands
together (a conflict), the highest-ranked operand is kept, then the cheapest choice, and the
others are resharded. When an operand's attribute is not the one its consumer needs, or a result's
not the one its producer makes, the edge gets a reshard (partial results that a consumer needs
reduced included).

Meshes (pipeline stages), as Paddle's Completer: an op runs on the mesh of its highest-ranked
known operand; ties go to the later mesh (activations flow into the next stage). A tensor used on
another mesh gets a cross-mesh transfer on that edge.

Termination: a tensor changes only when its offers change, and at most ``MAX_CHANGES`` times (then
it is frozen and reported); every visit follows a change, so the pass always ends.

Speed. The cost per op must not grow with the model (issue 3 asks for linear growth), and on large
models what grows is cache misses, not work. So the sweeps read dense per-run arrays and a
per-topology index (operand and result orders, shapes, the rules' entry points), never the
scattered ``Tensor`` and ``Op`` objects; specs and flattened rule answers are shared across the
model's identical layers; worklists are bytearrays (no heap, no log n); and the attributes reach
the graph as one list (``Graph.set_attrs``). On a stack of identical layers, a block of ops
entered in the state an earlier layer was entered in gets that layer's changes instead of its
visits (``completion_blocks``), so the rules run for a few layers whatever the depth.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

from spmdrules.completion.blocks import (
    Flags,
    Visit,
    close,
    entry_head,
    find_blocks,
    matches,
    open_visit,
)
from spmdrules.completion.blocks import replay as replay_block
from spmdrules.completion.cost import DEFAULT_COST_MODEL, CostModel
from spmdrules.completion.planning import Plan, divisible, fmt_bytes, plan_reshard, reshard_time
from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.graph.annotate import Annotation
from spmdrules.graph.errors import GraphError
from spmdrules.graph.graph import Graph, Op, Tensor
from spmdrules.graph.opschema import OpSchema

OfferKind = Literal["forward", "demand", "reverse"]
OriginKind = Literal["annotation", "forward", "demand", "reverse", "default"]

#: how often one tensor may change before it is frozen (a guard; no known model reaches it)
MAX_CHANGES: Final = 8
#: sweeps (one forward and one reverse each) before the pass stops and reports non-convergence
MAX_SWEEPS: Final = 64
#: replay repeated blocks (``completion_blocks``); off only to check that replaying changes nothing
REPLAY_BLOCKS = True
#: how many visited blocks of a run a block's entry state is compared with
RECENT_VISITS: Final = 4
_WEAK: Final = -(1 << 40)  # rank of an offer no known tensor drove (a placeholder's echo)


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
    rank: int = _WEAK
    note: str = ""

    @property
    def priority(self) -> int | None:
        return None if self.rank == _WEAK else self.rank >> 1


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
    """

    tensor: str
    op: str
    side: Literal["operand", "result"]
    src: DistAttr
    dst: DistAttr
    shape: tuple[int, ...]
    dtype: str

    @property
    def cross_mesh(self) -> bool:
        return self.src.mesh != self.dst.mesh

    def plan(self, cost: CostModel = DEFAULT_COST_MODEL) -> Plan:
        return plan_reshard(self.src, self.dst, self.shape, self.dtype, cost)

    def __str__(self) -> str:
        arrow = f"-> {self.op}" if self.side == "operand" else f"<- {self.op}"
        return f"{self.tensor} {arrow}: {self.src.mapping_str()} => {self.dst.mapping_str()}"


# An offer inside the pass is a plain tuple (it is made thousands of times per model):
# (attr, rank, op, kind code, driver or -1). Nothing in it is absolute, so an offer is the same
# tuple in every layer of a stack (see ``completion_blocks``): the op is counted from the
# tensor's ``_Index.base`` op, and the driver is a position among the op's operands (forward and
# demand offers) or results (reverse offers), not a tensor. ``Completion`` turns it into an
# ``Offer`` when asked.
_RawOffer = tuple[DistAttr, int, int, int, int]
_FWD, _REV, _DEM = 0, 1, 2
_KINDS: Final[tuple[OfferKind, ...]] = ("forward", "reverse", "demand")


class _State:
    """Per-tensor and per-op working arrays of one run, indexed by ``order``."""

    __slots__ = (
        "attr", "changes", "frozen", "natural", "needs", "offers", "rank", "rejected", "spec",
    )

    def __init__(self, n_tensors: int, n_ops: int) -> None:
        self.attr: list[DistAttr | None] = [None] * n_tensors
        self.rank: list[int] = [_WEAK] * n_tensors
        self.spec: list[TensorSpec | None] = [None] * n_tensors
        # offers per tensor (one per op and direction, in the order first made): None, the one
        # offer itself (most tensors get one: no list for them), or a list
        self.offers: list[_RawOffer | list[_RawOffer] | None] = [None] * n_tensors
        self.changes: list[int] = [0] * n_tensors
        self.frozen: list[bool] = [False] * n_tensors
        # offers refused per tensor: (offer, reason, detail, kept); ``kept`` is the position
        # among the op's operands of the one a conflict kept (its name ends the detail), or -1,
        # so that an entry names no tensor and reads the same in every layer of a stack
        self.rejected: dict[int, list[tuple[_RawOffer, str, str, int]]] = {}
        self.natural: list[tuple[DistAttr, ...] | None] = [None] * n_ops
        self.needs: list[tuple[DistAttr, ...] | None] = [None] * n_ops

    def offers_of(self, i: int) -> Sequence[_RawOffer]:
        o = self.offers[i]
        if o is None:
            return ()
        return o if isinstance(o, list) else (o,)


class Completion:
    """The result of ``complete(graph)``: every tensor's attribute and origin, the reshards, and
    totals. ``str(result)`` is a table; ``summary()`` is the totals and the reshards."""

    def __init__(
        self,
        graph: Graph,
        cost: CostModel,
        state: _State,
        run: _Run,
        reshards: tuple[ReshardEdge, ...],
        sweeps: int,
        rule_calls: int,
        converged: bool,
        blocks_replayed: int = 0,
    ) -> None:
        self.graph = graph
        self.cost = cost
        self._state = state
        self._run = run
        self._origin_cache: list[Origin | None] = [None] * len(graph.tensors)
        self.reshards = reshards
        self.iterations = sweeps
        self.rule_calls = rule_calls  # the rules' runs (a replayed block runs none)
        self.converged = converged
        #: block visits replayed from an earlier identical block (``completion_blocks``)
        self.blocks_replayed = blocks_replayed
        self._plans: tuple[Plan, ...] | None = None

    # ---- per tensor ------------------------------------------------------------------------
    def _t(self, tensor: Tensor | str) -> Tensor:
        return self.graph.tensor(tensor) if isinstance(tensor, str) else tensor

    def attr(self, tensor: Tensor | str) -> DistAttr:
        a = self._state.attr[self._t(tensor).order]
        assert a is not None
        return a

    def origin(self, tensor: Tensor | str) -> Origin:
        return self._origin(self._t(tensor))

    def _origin(self, t: Tensor) -> Origin:
        # computed on first use: the pass itself never needs the prose-level origin
        o = self._origin_cache[t.order]
        if o is None:
            o = self._run.origin_of(t)
            self._origin_cache[t.order] = o
        return o

    @property
    def origins(self) -> dict[str, Origin]:
        """Every tensor's origin, by name (the explanation index)."""
        return _without_gc(lambda: {t.name: self._origin(t) for t in self.graph.tensors})

    def _offer(self, raw: _RawOffer, i: int) -> Offer:
        a, rank, _, kind, drv = raw
        k = self._run.op_of(raw, i)
        ops, tensors = self.graph.ops, self.graph.tensors
        return Offer(a, rank, ops[k].name, k, _KINDS[kind],
                     None if drv < 0 else tensors[self._run.driver(raw, i)].name)

    def offers(self, tensor: Tensor | str) -> tuple[Offer, ...]:
        """Every attribute an op offered the tensor (one per op and direction)."""
        i = self._t(tensor).order
        return tuple(self._offer(o, i) for o in self._state.offers_of(i))

    def rejected(self, tensor: Tensor | str) -> tuple[Rejected, ...]:
        """The offers that lost, each with its reason (see ``explain`` for the prose)."""
        t = self._t(tensor)
        st = self._state
        chosen = st.attr[t.order]
        out = [Rejected(self._offer(o, t.order), why, detail)  # type: ignore[arg-type]
               for o, why, detail in self._run.rejected_of(t.order)]
        seen = {(r.offer.op, r.offer.kind) for r in out}
        origin = self._origin(t)
        ann = t.annotation
        for raw in st.offers_of(t.order):
            o = self._offer(raw, t.order)
            if o.attr == chosen or (o.op, o.kind) in seen or o.rank == _WEAK:
                continue
            if (chosen is not None and not divisible(chosen, t.shape)
                    and divisible(o.attr, t.shape)):
                out.append(Rejected(o, "divisibility",
                                    f"{chosen.mapping_str()} does not split {list(t.shape)} "
                                    f"evenly, so {o.op}'s rule drops that split"))
            elif ann is not None and ann.is_fully_closed:
                out.append(Rejected(o, "annotation", "the annotation is closed"))
            elif o.rank < origin.rank:
                out.append(Rejected(
                    o, "priority",
                    f"it carried priority {o.rank >> 1}"
                    + (" (inferred)" if o.rank % 2 == 0 else "")
                    + f" against {origin.rank >> 1}"
                    + (" (annotation)" if origin.rank % 2 else "")))
            else:
                out.append(Rejected(o, "cost", "same priority, but its reshards on this tensor's "
                                                "edges cost more (or tie and lose the order)"))
            seen.add((o.op, o.kind))
        # A consumer whose need differs but made no ranked offer (a one-operand op) still lost.
        for e in self.reshards_of(t):
            if e.side != "operand" or (e.op, "demand") in seen:
                continue
            o = Offer(e.dst, _WEAK, e.op, -1, "demand", None)
            if chosen is not None and not divisible(chosen, t.shape) and divisible(e.dst, t.shape):
                out.append(Rejected(o, "divisibility",
                                    f"{chosen.mapping_str()} does not split {list(t.shape)} "
                                    f"evenly, so {e.op}'s rule drops that split"))
            else:
                out.append(Rejected(o, "rule", f"{e.op}'s rule needs {e.dst.mapping_str()} "
                                               "given its other operands"))
        return tuple(out)

    def reshards_of(self, tensor: Tensor | str) -> tuple[ReshardEdge, ...]:
        name = self._t(tensor).name
        return tuple(e for e in self.reshards if e.tensor == name)

    # ---- totals ----------------------------------------------------------------------------
    @property
    def num_annotated(self) -> int:
        return sum(1 for t in self.graph.tensors if self._origin(t).kind == "annotation")

    @property
    def num_inferred(self) -> int:
        return sum(1 for t in self.graph.tensors
                   if self._origin(t).kind in ("forward", "demand", "reverse"))

    @property
    def num_default(self) -> int:
        return sum(1 for t in self.graph.tensors if self._origin(t).kind == "default")

    def plans(self) -> tuple[Plan, ...]:
        """One plan per reshard edge (planned on first call, then kept)."""
        if self._plans is None:
            self._plans = tuple(e.plan(self.cost) for e in self.reshards)
        return self._plans

    @property
    def bytes_moved(self) -> int:
        return sum(p.total_bytes for p in self.plans())

    @property
    def time(self) -> float:
        """Seconds all reshards take under the cost model."""
        return sum(p.time for p in self.plans())

    def summary(self) -> str:
        """Totals, then one line per reshard with its steps and bytes."""
        g = self.graph
        lines = [
            f"completion of {g.name!r}: {g.num_ops} ops, {g.num_tensors} tensors",
            f"  annotated {self.num_annotated}, inferred {self.num_inferred}, "
            f"defaulted {self.num_default}; {self.iterations} sweeps, {self.rule_calls} rule calls"
            + (f", {self.blocks_replayed} repeated blocks replayed" if self.blocks_replayed else "")
            + ("" if self.converged else " (NOT converged: frozen tensors kept)"),
            f"  reshards {len(self.reshards)}, bytes moved {fmt_bytes(self.bytes_moved)}, "
            f"time {self.time * 1e3:.3f} ms",
        ]
        if self.reshards:
            rows = [("tensor", "edge", "from", "to", "steps", "bytes")]
            for e, p in zip(self.reshards, self.plans(), strict=True):
                edge = f"-> {e.op}" if e.side == "operand" else f"<- {e.op}"
                steps = " + ".join(
                    s.kind.replace("_", "-")
                    + ("" if s.mesh_dim is None else f"({s.src.mesh.dim_names[s.mesh_dim]})")
                    for s in p.steps
                )
                rows.append((e.tensor, edge, e.src.mapping_str(), e.dst.mapping_str(), steps,
                             fmt_bytes(p.total_bytes)))
            lines.append(_table(rows))
        return "\n".join(lines)

    def table(self, tensors: Iterable[Tensor | str] | None = None) -> str:
        """One row per tensor: name, shape, attribute, placements, origin."""
        rows = [("tensor", "shape", "attr", "placements", "origin")]
        chosen = self.graph.tensors if tensors is None else [self._t(t) for t in tensors]
        for t in chosen:
            a = self.attr(t)
            rows.append((t.name, str(list(t.shape)), a.mapping_str(),
                         "[" + ", ".join(map(repr, a.placements)) + "]",
                         _origin_str(self._origin(t))))
        return _table(rows)

    def __str__(self) -> str:
        return self.table() + "\n" + self.summary()

    def __repr__(self) -> str:
        return (f"Completion({self.graph.name!r}: {self.num_annotated} annotated, "
                f"{self.num_inferred} inferred, {len(self.reshards)} reshards)")


def _origin_str(o: Origin) -> str:
    if o.kind == "annotation":
        return "annotation" + (f" ({o.note})" if o.note else "")
    if o.kind == "default":
        return "default (no annotation reaches it)"
    return f"{o.kind} via {o.op}" + (f" from {o.driver}" if o.driver else "")


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for k, r in enumerate(rows):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


# ---- the pass ------------------------------------------------------------------------------------
class _Run:
    """One completion run over a graph (the working state and the visiting logic)."""

    def __init__(self, graph: Graph, cost: CostModel) -> None:
        self.g = graph
        self.cost = cost
        self.ops = ops = graph.ops
        self.tensors = tensors = graph.tensors
        self.st = _State(len(tensors), len(ops))
        self.rule_calls = 0
        self.placeholders: dict[tuple[ProcessMesh, tuple[int, ...]], TensorSpec] = {}
        self.div_cache: dict[tuple[DistAttr, tuple[int, ...]], bool] = {}
        index = _indices(ops, tensors)
        self.ins, self.outs, self.consumers = index.ins, index.outs, index.consumers
        self.producer, self.calls, self.shapes = index.producer, index.calls, index.shapes
        self.sources, self.base = index.sources, index.base
        self.block_of, self.blocks = index.block_of, index.blocks if REPLAY_BLOCKS else ()
        self.replays = 0
        self.ann_keys: list[Annotation | None] = []  # canonical annotations, with blocks
        # Worklists are one byte per op: a sweep finds the next pending op with bytearray.find,
        # so a visit costs the same whatever the model's size (a heap's log n does not).
        self.fwd_next = bytearray(len(ops))
        self.rev_next = bytearray(len(ops))
        self.pending = bytearray(len(ops))
        self.cur = -1
        self.direction = 1
        self.defaulted: set[int] = set()
        # The sweeps read dense arrays, never the Tensor objects: on large models those are
        # scattered in memory, and each visit would miss the cache.
        self.annotated = graph.annotations()
        self.ann: list[Annotation | None] = [None] * len(tensors)
        first: dict[int, tuple[int, ProcessMesh]] = {}  # by mesh identity: its first tensor
        for i, ann in self.annotated:
            self.ann[i] = ann
            m = ann.mesh
            f = first.get(id(m))
            if f is None or i < f[0]:
                first[id(m)] = (i, m)
        # the meshes in the order they first appear among the tensors
        meshes: dict[ProcessMesh, int] = {}
        for _, m in sorted(first.values(), key=_first):
            meshes.setdefault(m, len(meshes))
        if not meshes:
            raise NoAnnotationError(
                f"graph {graph.name!r} has no annotated tensor, so completion has no mesh to "
                "start from; annotate at least one tensor with shard(tensor, mesh, spec)"
            )
        self.mesh_rank = meshes
        self.single_mesh: ProcessMesh | None = next(iter(meshes)) if len(meshes) == 1 else None
        if self.blocks:
            # equal annotations as one object (their attributes too), so that blocks compare
            # them by identity
            keys: list[Annotation | None] = [None] * len(tensors)
            for i, ann in self.annotated:
                keys[i] = _canonical(ann)
            self.ann_keys = keys
        self.default_mesh = next(iter(meshes))

    # ---- specs --------------------------------------------------------------------------------
    def placeholder(self, mesh: ProcessMesh, shape: tuple[int, ...]) -> TensorSpec:
        key = (mesh, shape)
        s = self.placeholders.get(key)
        if s is None:
            s = TensorSpec._make(shape, DistAttr.replicated(mesh, len(shape)))
            self.placeholders[key] = s
        return s

    def spec_at(self, i: int, mesh: ProcessMesh) -> TensorSpec:
        """Tensor ``i`` as its op on ``mesh`` sees it (the spec its rule is called with)."""
        st = self.st
        s = st.spec[i]
        if s is not None and s.attr.mesh is mesh:
            return s
        a = st.attr[i]
        shape = self.shapes[i]
        if a is None:
            return self.placeholder(mesh, shape)
        if a.mesh is mesh or a.mesh == mesh:
            s = _spec(shape, a)
            st.spec[i] = s
            return s
        # A tensor from another mesh enters the op as the same layout on the op's mesh when
        # the meshes have one shape, else replicated; the edge gets a cross-mesh transfer.
        if a.mesh.shape == mesh.shape:
            return TensorSpec._make(shape, DistAttr._make(mesh, a.multi_dims_mapping,
                                                          a.partial_items))
        return self.placeholder(mesh, shape)

    def spec_fn(self, mesh: ProcessMesh) -> Callable[[Tensor], TensorSpec]:
        spec_at = self.spec_at

        def spec(t: Tensor) -> TensorSpec:
            return spec_at(t.order, mesh)

        return spec

    def best_known(self, idx: tuple[int, ...]) -> tuple[ProcessMesh, int, int]:
        """The op's mesh, the position in ``idx`` of its highest-ranked known tensor (-1: none)
        and that tensor's rank. Ties go to the later mesh, then the earlier position."""
        st = self.st
        attrs, ranks = st.attr, st.rank
        best, best_r = -1, _WEAK - 1
        if self.single_mesh is not None:
            for pos, i in enumerate(idx):
                if attrs[i] is not None and ranks[i] > best_r:
                    best, best_r = pos, ranks[i]
            return self.single_mesh, best, best_r
        best_key = (best_r, -1)
        for pos, i in enumerate(idx):
            a = attrs[i]
            if a is not None:
                key = (ranks[i], self.mesh_rank.get(a.mesh, -1))
                if key > best_key:
                    best, best_key = pos, key
        if best < 0:
            return self.default_mesh, -1, _WEAK
        a = attrs[idx[best]]
        assert a is not None
        return a.mesh, best, best_key[0]

    def is_divisible(self, attr: DistAttr, shape: tuple[int, ...]) -> bool:
        key = (attr, shape)
        v = self.div_cache.get(key)
        if v is None:
            v = divisible(attr, shape)
            self.div_cache[key] = v
        return v

    # ---- visiting -----------------------------------------------------------------------------
    def forward(self, k: int) -> None:
        st = self.st
        ins = self.ins[k]
        mesh, driver, drank = self.best_known(ins)
        if driver < 0:
            return  # nothing known yet; a later change re-queues the op
        need, outs = self.run_forward(k, mesh)
        out_rank = (drank >> 1) << 1
        offer = self.offer
        base = self.base
        for i, a in zip(self.outs[k], outs, strict=True):
            offer(i, (a, out_rank, k - base[i], _FWD, driver))
        if len(ins) == 1:
            return
        # A demand carries the rank of the op's best *other* known operand: an operand does not
        # vouch for the attribute the op asks of itself.
        attrs, ranks = st.attr, st.rank
        for pos, i in enumerate(ins):
            best, best_r = -1, _WEAK
            for q, j in enumerate(ins):
                if j != i and attrs[j] is not None and ranks[j] > best_r:
                    best, best_r = q, ranks[j]
            offer(i, (need[pos], _WEAK if best < 0 else (best_r >> 1) << 1, k - base[i], _DEM,
                      best))

    def run_forward(
        self, k: int, mesh: ProcessMesh
    ) -> tuple[tuple[DistAttr, ...], tuple[DistAttr, ...]]:
        """Op ``k``'s forward rule on its operands' current attributes: what it needs of its
        operands and what it makes, remembered for the reshard edges."""
        st = self.st
        self.rule_calls += 1
        call = self.calls[k]
        try:
            if call is not None:
                spec = self.spec_at
                info = call[0](*[spec(i, mesh) for i in self.ins[k]], *call[1])
                need, outs = self.flat(k, call[4], info)
            else:
                op = self.ops[k]
                info = op.rule.infer_forward(*op.forward_args(self.spec_fn(mesh)))
                need, outs = self.flat(k, op.schema, info)
        except SpmdError as e:
            need, outs = self.settle_conflict(self.ops[k], mesh, e)
        st.needs[k] = need
        st.natural[k] = outs
        return need, outs

    def flat(
        self, k: int, schema: OpSchema, info: SpmdInfo
    ) -> tuple[tuple[DistAttr, ...], tuple[DistAttr, ...]]:
        """``op.flat_info(info)`` for op ``k``, memoised on the answer (see ``_FLAT``)."""
        n_in = len(self.ins[k])
        hit = _FLAT.get(id(info))
        if hit is not None and hit[0] is info and hit[1] is schema and hit[2] == n_in:
            return hit[3], hit[4]
        ins, outs = self.ops[k].flat_info(info)
        if len(_FLAT) >= _FLAT_MAX:
            _FLAT.clear()
        _FLAT[id(info)] = (info, schema, n_in, ins, outs)
        return ins, outs

    def settle_conflict(
        self, op: Op, mesh: ProcessMesh, error: SpmdError
    ) -> tuple[tuple[DistAttr, ...], tuple[DistAttr, ...]]:
        """The rule refused the operands together: keep one known operand (highest rank, then
        the cheapest total reshard), give the others placeholders, and record the losers."""
        st = self.st
        ins = op.inputs
        known = [t for t in ins if st.attr[t.order] is not None]
        top = max(st.rank[t.order] for t in known)
        full = self.spec_fn(mesh)
        best: tuple[float, int, tuple[DistAttr, ...], tuple[DistAttr, ...]] | None = None
        for pos, keep in enumerate(known):
            if st.rank[keep.order] != top:
                continue

            def spec(t: Tensor, keep: Tensor = keep) -> TensorSpec:
                return full(t) if t is keep else self.placeholder(mesh, t.shape)

            self.rule_calls += 1
            try:
                need, outs = op.flat_info(op.rule.infer_forward(*op.forward_args(spec)))
            except SpmdError:
                continue
            total = 0.0
            for t, n in zip(ins, need, strict=True):
                a = st.attr[t.order]
                if a is not None:
                    total += reshard_time(a, n, t.shape, t.dtype, self.cost)
            if best is None or (total, pos) < (best[0], best[1]):
                best = (total, pos, need, outs)
        if best is None:
            given = ", ".join(f"{t.name}={full(t).attr.mapping_str()}" for t in known)
            raise UnresolvableConflictError(
                f"op {op.name!r} ({op.type}): its rule refuses the operands' attributes "
                f"({given}) and every one of them alone: {error}. Change the annotations that "
                "reach this op"
            ) from error
        need = best[2]
        for t, n in zip(ins, need, strict=True):
            a = st.attr[t.order]
            if a is not None and a != n:
                st.rejected.setdefault(t.order, []).append((
                    (n, _WEAK, op.order - self.base[t.order], _DEM, -1), "rule",
                    f"{op.type} cannot take it together with its other operands ({error}); "
                    "the op keeps", ins.index(known[best[1]]),
                ))
        return need, best[3]

    def reverse(self, k: int) -> None:
        st = self.st
        nat = st.natural[k]
        outs = self.outs[k]
        attrs = st.attr
        if nat is not None and all(
            attrs[i] is None or attrs[i] == n for i, n in zip(outs, nat, strict=True)
        ):
            return  # the results are what the op makes: nothing to push upstream
        call = self.calls[k]
        op = None
        if call is not None and call[5]:
            if call[2] is None:
                return  # no reverse rule
        else:
            op = self.ops[k]
            if not op.rule.has_reverse:
                return
        mesh, driver, drank = self.best_known(outs)
        if driver < 0:
            return
        self.rule_calls += 1
        try:
            if op is None:
                assert call is not None and call[2] is not None
                spec = self.spec_at
                info = call[2](*[spec(i, mesh) for i in self.ins[k]],
                               *[spec(i, mesh) for i in outs], *call[3])
                need, _ = self.flat(k, call[4], info)
            else:
                info = op.rule.infer_reverse(*op.reverse_args(self.spec_fn(mesh)))
                need, _ = self.flat(k, op.schema, info)
        except SpmdError:
            return  # the reverse rule refuses: the forward answer stands and the edge reshards
        rank = (drank >> 1) << 1
        offer, base = self.offer, self.base
        for i, a in zip(self.ins[k], need, strict=True):
            offer(i, (a, rank, k - base[i], _REV, driver))

    # ---- choosing -----------------------------------------------------------------------------
    def offer(self, i: int, o: _RawOffer) -> None:
        st = self.st
        # one offer per op and direction: a new one replaces the old in its place
        held = st.offers[i]
        if held is None:
            st.offers[i] = o
            n = 1
        elif isinstance(held, list):
            k, kind = o[2], o[3]
            for pos, p in enumerate(held):
                if p[2] == k and p[3] == kind:
                    held[pos] = o
                    break
            else:
                held.append(o)
            n = len(held)
        elif held[2] == o[2] and held[3] == o[3]:
            st.offers[i] = o
            n = 1
        else:
            st.offers[i] = [held, o]
            n = 2
        cur = st.attr[i]
        if cur is not None and o[1] <= st.rank[i] and o[0] == cur:
            return  # agrees with what the tensor has: nothing can change
        ann = self.ann[i]
        if (ann is not None and ann.is_fully_closed) or st.frozen[i]:
            return
        new: DistAttr | None
        if cur is None and ann is None and n == 1 and self.is_divisible(o[0], self.shapes[i]):
            new, rank = o[0], o[1]  # the first offer to an unknown tensor (the common case)
        else:
            new, rank = self.choose(i, st.offers_of(i))
        if new is None or (new == cur and rank == st.rank[i]):
            return
        if new != cur:
            st.changes[i] += 1
            if st.changes[i] > MAX_CHANGES:
                st.frozen[i] = True
                return
        st.attr[i] = new
        st.rank[i] = rank
        st.spec[i] = None
        if new != cur:
            self.changed(i)

    def choose(self, i: int, offers: Sequence[_RawOffer]) -> tuple[DistAttr | None, int]:
        """Tensor ``i``'s attribute and rank from its offers, by the policy (module docs)."""
        st = self.st
        ann = self.ann[i]
        valid: list[_RawOffer] = []
        for o in offers:
            a = o[0] if ann is None else _project(ann, o[0], o[1])
            if a is None or not (ann is not None or self.is_divisible(a, self.shapes[i])):
                rej = st.rejected.setdefault(i, [])
                if not any(r[0] == o for r in rej):
                    rej.append((o, "divisibility", "it does not split the tensor's dims evenly", -1)
                               if a is not None else
                               (o, "annotation", "it is on another mesh than the annotation", -1))
                continue
            valid.append(o if a is o[0] else (a, o[1], o[2], o[3], o[4]))
        if not valid:
            return (None, _WEAK) if ann is None else (ann.attr, 2 * ann.priority + 1)
        top = max(o[1] for o in valid)
        cands = sorted((o for o in valid if o[1] == top), key=_offer_key)
        rank = top if ann is None else max(top, 2 * ann.priority + 1)
        first = cands[0][0]
        if all(o[0] == first for o in cands):
            return first, rank
        # equal rank, different attributes: least communication over the tensor's edges
        best: tuple[float, DistAttr] | None = None
        for o in cands:
            phi = self.edge_cost(self.tensors[i], o[0], valid)
            if best is None or phi < best[0]:
                best = (phi, o[0])
        assert best is not None
        return best[1], rank

    def edge_cost(self, t: Tensor, v: DistAttr, offers: list[_RawOffer]) -> float:
        """Seconds of the reshards on ``t``'s edges if ``t`` were ``v``: from what its producer
        makes, and to what each consumer needs (its demand, else its reverse offer)."""
        total = 0.0
        by_op: dict[int, _RawOffer] = {}
        for o in offers:
            if o[3] == _FWD:
                total += reshard_time(o[0], v, t.shape, t.dtype, self.cost)
            elif o[3] == _DEM or o[2] not in by_op:
                by_op[o[2]] = o
        for o in by_op.values():
            total += reshard_time(v, o[0], t.shape, t.dtype, self.cost)
        return total

    def changed(self, i: int) -> None:
        """Queue the ops that must look again: consumers forward, the producer in reverse. An op
        ahead of the cursor in the current sweep's direction joins this sweep, others the next."""
        cur = self.cur
        if self.direction == 1:
            pending, later = self.pending, self.fwd_next
            for c in self.consumers[i]:
                if c > cur:
                    pending[c] = 1
                else:
                    later[c] = 1
            p = self.producer[i]
            if p >= 0:
                self.rev_next[p] = 1
        else:
            fwd_next = self.fwd_next
            for c in self.consumers[i]:
                fwd_next[c] = 1
            p = self.producer[i]
            if 0 <= p < cur:
                self.pending[p] = 1
            elif p >= 0:
                self.rev_next[p] = 1

    def sweep(self, pending: bytearray, direction: int) -> None:
        """Visit the pending ops in order (forward: ascending), including those queued ahead of
        the cursor during the sweep."""
        self.direction = direction
        self.pending = pending
        forward = direction == 1
        if self.blocks:
            self.sweep_blocks(pending, forward)
        else:
            visit = self.forward if forward else self.reverse
            find = pending.find if forward else pending.rfind
            k = find(1)
            while k >= 0:
                pending[k] = 0
                self.cur = k
                visit(k)
                k = find(1, k + 1) if forward else find(1, 0, k)
        self.cur = -1 if forward else len(self.ops)

    def sweep_blocks(self, pending: bytearray, forward: bool) -> None:
        """``sweep`` on a model with repeated blocks: a block entered in the state an earlier
        block of its run was entered in gets that block's changes instead of its visits (see
        ``completion_blocks``)."""
        visit = self.forward if forward else self.reverse
        find = pending.find if forward else pending.rfind
        block_of, blocks, st = self.block_of, self.blocks, self.st
        flags: Flags = (pending, self.fwd_next, self.rev_next)
        # per run: the blocks visited in this sweep, the latest first (a few: layers that
        # alternate, say two kinds of annotation, replay from the one two layers back)
        recent: dict[int, list[Visit]] = {}
        inside = -1  # the block the cursor is in
        open_: Visit | None = None  # its visit, when it can be recorded
        k = find(1)
        while k >= 0:
            b = block_of[k]
            if b != inside:
                if open_ is not None:
                    close(st, open_, flags)
                    seen_before = recent.setdefault(open_.block.run, [])
                    seen_before.insert(0, open_)
                    del seen_before[RECENT_VISITS:]
                    open_ = None
                inside = b
                if b >= 0:
                    blk = blocks[b]
                    head = entry_head(st, self.ann_keys, blk, flags)
                    seen = next((v for v in recent.get(blk.run, ())
                                 if v.head == head and matches(st, blk, v)), None)
                    if seen is not None:
                        replay_block(st, blk, seen, flags)
                        self.replays += 1
                        inside = -1
                        k = find(1, blk.stop) if forward else find(1, 0, blk.start)
                        continue
                    open_ = open_visit(st, blk, head)
            pending[k] = 0
            self.cur = k
            visit(k)
            k = find(1, k + 1) if forward else find(1, 0, k)
        if open_ is not None:
            close(st, open_, flags)

    # ---- driver -------------------------------------------------------------------------------
    def run(self) -> Completion:
        st = self.st
        defaulted: set[int] = set()
        n = len(self.ops)
        self.fwd_next = bytearray(b"\x01") * n
        keys = self.ann_keys
        for i, ann in self.annotated:
            st.attr[i] = (keys[i] or ann).attr if keys else ann.attr
            st.rank[i] = 2 * ann.priority + 1
            if self.producer[i] >= 0:
                self.rev_next[self.producer[i]] = 1
        sweeps = 0
        converged = True
        while self.fwd_next.find(1) >= 0 or self.rev_next.find(1) >= 0:
            if sweeps >= MAX_SWEEPS:
                converged = False
                break
            sweeps += 1
            fwd, self.fwd_next = self.fwd_next, bytearray(n)
            self.sweep(fwd, 1)
            rev, self.rev_next = self.rev_next, bytearray(n)
            self.sweep(rev, -1)
            if self.fwd_next.find(1) < 0 and self.rev_next.find(1) < 0:
                # Sources no annotation reaches are replicated on the default mesh, and
                # propagation resumes from them.
                for i in self.sources:
                    if st.attr[i] is None:
                        st.attr[i] = DistAttr.replicated(self.default_mesh, len(self.shapes[i]))
                        defaulted.add(i)
                        self.changed(i)
                # So are values whose every offer was refused (an uneven split and nothing
                # else), on the mesh of those offers: their consumers took them replicated.
                for i in list(st.rejected):
                    if st.attr[i] is None:
                        mesh = st.offers_of(i)[0][0].mesh
                        st.attr[i] = DistAttr.replicated(mesh, len(self.shapes[i]))
                        defaulted.add(i)
                        self.changed(i)
        if any(st.frozen):
            converged = False
        # What each op needs from its final operands: already there at convergence (any change
        # re-queues the consumers); after a cut-off, recomputed so the reshards are consistent.
        for k, need in enumerate(st.needs):
            if need is None or not converged:
                self.forward_needs_only(k)
        self.defaulted = defaulted
        self.g.set_attrs(st.attr)
        reshards = self.reshard_edges()
        return Completion(self.g, self.cost, st, self, reshards, sweeps, self.rule_calls,
                          converged, self.replays)

    def forward_needs_only(self, k: int) -> None:
        st = self.st
        for i in self.ins[k] + self.outs[k]:
            if st.attr[i] is None:  # only values downstream of nothing at all
                st.attr[i] = DistAttr.replicated(self.default_mesh, self.tensors[i].ndim)
        mesh, _, _ = self.best_known(self.ins[k])
        self.run_forward(k, mesh)

    def rejected_of(self, i: int) -> list[tuple[_RawOffer, str, str]]:
        """Tensor ``i``'s refused offers: (offer, reason, detail)."""
        out = []
        for o, why, detail, kept in self.st.rejected.get(i, ()):
            if kept >= 0:
                name = self.tensors[self.ins[self.op_of(o, i)][kept]].name
                detail = f"{detail} {name} and reshards this operand"
            out.append((o, why, detail))
        return out

    def op_of(self, o: _RawOffer, i: int) -> int:
        """The op that made offer ``o`` to tensor ``i``."""
        return o[2] + self.base[i]

    def driver(self, o: _RawOffer, i: int) -> int:
        """The tensor that drove offer ``o`` to tensor ``i`` (the offer must have one)."""
        return (self.outs if o[3] == _REV else self.ins)[self.op_of(o, i)][o[4]]

    def origin_of(self, t: Tensor) -> Origin:
        st = self.st
        if t.order in self.defaulted:
            return Origin("default")
        a = st.attr[t.order]
        best: _RawOffer | None = None
        for o in st.offers_of(t.order):
            if o[0] == a and (best is None or o[1] > best[1]
                              or (o[1] == best[1] and _offer_key(o) < _offer_key(best))):
                best = o
        ann = t.annotation
        name = None if best is None else self.ops[self.op_of(best, t.order)].name
        drv = (None if best is None or best[4] < 0
               else self.tensors[self.driver(best, t.order)].name)
        if ann is not None:
            rank = 2 * ann.priority + 1
            if a == ann.attr or best is None:
                return Origin("annotation", rank=rank)
            return Origin("annotation", name, drv, rank,
                          f"open dims from {_KINDS[best[3]]} via {name}")
        if best is None:
            return Origin("default")
        return Origin(_KINDS[best[3]], name, drv, st.rank[t.order])

    def reshard_edges(self) -> tuple[ReshardEdge, ...]:
        tensors, ops = self.tensors, self.ops
        out: list[ReshardEdge] = []
        for i, k, side, src, dst in self.raw_edges():
            t = tensors[i]
            out.append(ReshardEdge(t.name, ops[k].name, side, src, dst, t.shape, t.dtype))
        return tuple(out)

    def raw_edges(self) -> list[tuple[int, int, Literal["operand", "result"], DistAttr, DistAttr]]:
        """(tensor, op, side, src, dst) of every reshard edge, in op order. A repeated block
        whose attributes and rule answers are an earlier block's has that block's edges."""
        st = self.st
        attrs, needs, natural = st.attr, st.needs, st.natural
        blocks, block_of = self.blocks, self.block_of
        out: list[tuple[int, int, Literal["operand", "result"], DistAttr, DistAttr]] = []
        seen: dict[int, tuple[tuple[Any, ...], list[Any]]] = {}  # per run: state, local edges
        # by index: iterating the Op objects themselves would touch each one (its reference
        # count), a cache miss per op on large models, where only the few with an edge are read
        k, n = 0, len(needs)
        while k < n:
            b = block_of[k] if blocks else -1
            if b < 0 or blocks[b].start != k:
                self.op_edges(k, out)
                k += 1
                continue
            blk = blocks[b]
            key = (blk.gather(attrs), needs[blk.start:blk.stop], natural[blk.start:blk.stop])
            prev = seen.get(blk.run)
            if prev is not None and prev[0] == key:
                for j, dk, side, src, dst in prev[1]:
                    out.append((blk.tensors[j], blk.start + dk, side, src, dst))
            else:
                mine: list[tuple[int, int, Literal["operand", "result"], DistAttr, DistAttr]] = []
                for kk in range(blk.start, blk.stop):
                    self.op_edges(kk, mine)
                local = {i: j for j, i in enumerate(blk.tensors)}
                seen[blk.run] = (key, [(local[i], kk - blk.start, side, src, dst)
                                       for i, kk, side, src, dst in mine])
                out.extend(mine)
            k = blk.stop
        return out

    def op_edges(
        self, k: int, out: list[tuple[int, int, Literal["operand", "result"], DistAttr, DistAttr]]
    ) -> None:
        st = self.st
        attrs = st.attr
        need, nat = st.needs[k], st.natural[k]
        assert need is not None and nat is not None
        for i, n in zip(self.ins[k], need, strict=True):
            a = attrs[i]
            if a is not n and a != n:
                assert a is not None
                out.append((i, k, "operand", a, n))
        for i, n in zip(self.outs[k], nat, strict=True):
            a = attrs[i]
            if a is not n and a != n:
                assert a is not None
                out.append((i, k, "result", n, a))


_Call = tuple[Callable[..., SpmdInfo], tuple[Any, ...], Callable[..., SpmdInfo] | None,
              tuple[Any, ...], OpSchema, bool]


class _Index:
    """Flat arrays of one graph topology, shared by every run on it.

    ``calls[k]`` is set for ops whose operands are one tensor per parameter (no list, no absent
    optional, not generic): their rules' bound entry points and attribute tails, so a visit calls
    the rule with the flat operand specs without touching the ``Op``; its last entry says whether
    the results are too (else the reverse rule goes through the ``Op``). Equal tails are shared,
    so the layers of a model read one.
    """

    __slots__ = ("base", "block_of", "blocks", "calls", "consumers", "ins", "outs", "producer",
                 "shapes", "sources")

    def __init__(self, ops: tuple[Op, ...], tensors: tuple[Tensor, ...]) -> None:
        self.ins = [tuple(t.order for t in op.inputs) for op in ops]
        self.outs = [tuple(t.order for t in op.outputs) for op in ops]
        cons: list[list[int]] = [[] for _ in tensors]
        for k, idx in enumerate(self.ins):
            for i in dict.fromkeys(idx):
                cons[i].append(k)
        self.consumers = [tuple(c) for c in cons]
        self.producer = [-1 if t.producer is None else t.producer.order for t in tensors]
        self.sources = [i for i, p in enumerate(self.producer) if p < 0]
        # offers count their op from the tensor's producer (else its first consumer), so one
        # offer is the same tuple in every layer of a stack (see completion_blocks)
        self.base = [p if p >= 0 else (c[0] if c else 0)
                     for p, c in zip(self.producer, self.consumers, strict=True)]
        # the tensors' shapes, interned: a change of a tensor's shape rebuilds the topology
        shapes: dict[tuple[int, ...], tuple[int, ...]] = {}
        self.shapes = [shapes.setdefault(t.shape, t.shape) for t in tensors]
        tails: dict[Any, tuple[Any, ...]] = {}
        entries: dict[int, tuple[Callable[..., SpmdInfo], Callable[..., SpmdInfo] | None]] = {}
        calls: list[_Call | None] = []
        for op in ops:
            schema = op.schema
            if schema.generic or not all(type(v) is Tensor for v in op.operands):
                calls.append(None)
                continue
            rule = schema.rule
            entry = entries.get(id(rule))
            if entry is None:
                entry = entries[id(rule)] = (
                    rule.infer_forward, rule.infer_reverse if rule.has_reverse else None)
            calls.append((entry[0], _intern_tail(tails, schema, op.attrs), entry[1],
                          _intern_tail(tails, schema, schema.reverse_attr_values(op.attrs)),
                          schema, all(type(v) is Tensor for v in op.results)))
        self.calls = calls
        self.block_of, self.blocks = find_blocks(
            self.ins, self.outs, self.producer, self.consumers, calls, self.shapes,
            [t.dtype for t in tensors])


def _intern_tail(
    tails: dict[Any, tuple[Any, ...]], schema: OpSchema, values: tuple[Any, ...]
) -> tuple[Any, ...]:
    """The first tail of ``schema``'s ops equal to ``values``, value for value and type for type
    (1, 1.0 and True stay apart, and a list from an equal tuple), so equal ops share one."""
    try:
        key = (schema, *((type(v), (*v,) if type(v) is list else v) for v in values))
        return tails.setdefault(key, values)
    except TypeError:  # unhashable (a nested list): not shared
        return values


# The index of a topology, by the identity of ``Graph.ops``: one cached tuple until the graph
# changes (the tuple is held, so its id cannot be reused); the graph's own properties rebuild
# tuples on every access, which costs more than the whole pass.
_INDEX_CACHE: dict[int, tuple[tuple[Op, ...], _Index]] = {}


def _indices(ops: tuple[Op, ...], tensors: tuple[Tensor, ...]) -> _Index:
    hit = _INDEX_CACHE.get(id(ops))
    if hit is not None and hit[0] is ops:
        return hit[1]
    value = _Index(ops, tensors)
    if len(_INDEX_CACHE) >= 4:
        _INDEX_CACHE.pop(next(iter(_INDEX_CACHE)))
    _INDEX_CACHE[id(ops)] = (ops, value)
    return value


# TensorSpecs interned by (shape, attr): the layers of a model repeat a few hundred of them, so a
# run allocates almost none, and the rules' memo compares its keys by identity.
_SPECS: dict[tuple[tuple[int, ...], DistAttr], TensorSpec] = {}
_SPECS_MAX: Final = 1 << 16


def _spec(shape: tuple[int, ...], attr: DistAttr) -> TensorSpec:
    key = (shape, attr)
    s = _SPECS.get(key)
    if s is None or s.attr.mesh is not attr.mesh:  # keep the caller's mesh object (``is`` tests)
        if len(_SPECS) >= _SPECS_MAX:
            _SPECS.clear()
        s = _SPECS[key] = TensorSpec._make(shape, attr)
    return s


# Flattened rule answers by the answer's identity: the rules' memo hands back the same SpmdInfo
# for every layer, so each is flattened once. The entry holds the answer (its id stays unique).
_FLAT: dict[int, tuple[SpmdInfo, OpSchema, int, tuple[DistAttr, ...], tuple[DistAttr, ...]]] = {}
_FLAT_MAX: Final = 1 << 14


# One object per distinct annotation, so that the layers of a stack share theirs; by the identity
# of each annotation seen (held, so its id stays unique), to skip comparing it on the next run.
_CANON: dict[int, tuple[Annotation, Annotation]] = {}
_CANON_BY_VALUE: dict[Annotation, Annotation] = {}
_CANON_MAX: Final = 1 << 16


def _canonical(ann: Annotation) -> Annotation:
    hit = _CANON.get(id(ann))
    if hit is not None and hit[0] is ann:
        return hit[1]
    if len(_CANON) >= _CANON_MAX:
        _CANON.clear()
        _CANON_BY_VALUE.clear()
    canon = _CANON_BY_VALUE.setdefault(ann, ann)
    _CANON[id(ann)] = (ann, canon)
    return canon


def _first(entry: tuple[int, ProcessMesh]) -> int:
    return entry[0]


def _offer_key(o: _RawOffer) -> tuple[int, int]:
    """The tie-break: the producer's forward offer first, then consumers in topological order."""
    return (0 if o[3] == _FWD else 1, o[2])


def _project(ann: Any, offered: DistAttr, rank: int) -> DistAttr | None:
    """An offer seen through an annotation: closed dims as annotated, hinted open dims keep their
    hint unless the offer outranks the annotation, other open dims as offered. None if the
    offer's mesh is not the annotation's."""
    if offered.mesh != ann.mesh:
        return None
    used: set[int] = set()
    dims: list[tuple[int, ...] | None] = []
    outrank = rank > 2 * ann.priority + 1
    for spec, closed in zip(ann.dims, ann.closed, strict=True):
        if closed or (spec is not None and not outrank):
            dims.append(tuple(spec))
            used.update(spec)
        else:
            dims.append(None)
    mdm: list[tuple[int, ...]] = []
    for d, fixed in enumerate(dims):
        if fixed is not None:
            mdm.append(fixed)
        else:
            ms = tuple(m for m in offered.multi_dims_mapping[d] if m not in used)
            used.update(ms)
            mdm.append(ms)
    # a partial the user wrote stands; otherwise the offer's, on mesh dims still free
    part = ann.partial or tuple((m, rt) for m, rt in offered.partial_items if m not in used)
    return DistAttr._make(ann.mesh, tuple(mdm), tuple(part))


def complete(graph: Graph, cost: CostModel = DEFAULT_COST_MODEL) -> Completion:
    """Complete every tensor's attribute from the graph's annotations; see the module docs.

    Writes ``tensor.attr`` for every tensor (never ``tensor.annotation``) and returns the
    ``Completion`` with origins, reshards and totals. Running it again gives the same result.
    """
    if not isinstance(graph, Graph):
        raise CompletionError(f"complete: expected a Graph, got {type(graph).__name__}")
    graph.validate()
    return _without_gc(lambda: _Run(graph, cost).run())


_T = TypeVar("_T")


def _without_gc(fn: Callable[[], _T]) -> _T:
    """``fn()`` with the cyclic collector off: it makes a bulk of small objects without reference
    cycles (a few per op or tensor), and the collector would rescan the whole graph many times
    over on large models. The objects are scanned once, at the first collection after.

    A plain function, not a generator-based context manager: leaving one allocates once the
    collector is back on, which would run that young-generation collection here already."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return fn()
    finally:
        if was_enabled:
            gc.enable()
