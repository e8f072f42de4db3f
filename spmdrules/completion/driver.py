"""The completion pass: ``complete(graph)`` sweeps until nothing changes, then builds the result."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property
from itertools import compress

from spmdrules.completion.conflicts import Rules
from spmdrules.completion.cost import DEFAULT_COST_MODEL, CostModel
from spmdrules.completion.dropped import dropped_lines, find_dropped, warn_dropped
from spmdrules.completion.edges import reshard_edges
from spmdrules.completion.masks import proven
from spmdrules.completion.memory import memory
from spmdrules.completion.offers import KINDS, RawOffer
from spmdrules.completion.provenance import Provenance
from spmdrules.completion.rank import annotation, is_annotation, priority
from spmdrules.completion.reshard_plans import ReshardError, ReshardPlan, divisible, fmt_bytes
from spmdrules.completion.result import (
    WEAK_RANK,
    CompletionError,
    DroppedSplit,
    Offer,
    Origin,
    Rejected,
    ReshardEdge,
    origin_str,
    reshard_table,
    table,
)
from spmdrules.completion.run_state import RunState
from spmdrules.completion.state import MAX_CHANGES, MAX_SWEEPS, State
from spmdrules.completion.sweeps import Sweeps
from spmdrules.completion.worklist import Worklists
from spmdrules.core.attr import DistAttr
from spmdrules.core.bulk import without_gc
from spmdrules.core.progress import stage
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Tensor


class Completion:
    """The result of ``complete(graph)``: every tensor's attribute and origin, the reshards, and
    totals. ``str(result)`` is a table; ``summary()`` is the totals and the reshards."""

    def __init__(
        self,
        graph: Graph,
        cost: CostModel,
        state: State,
        provenance: Provenance,
        reshards: tuple[ReshardEdge, ...],
        sweeps: int,
        rule_calls: int,
        converged: bool,
        blocks_replayed: int = 0,
    ) -> None:
        self.graph = graph
        self.cost = cost
        self._state = state
        self._provenance = provenance
        self._origin_cache: list[Origin | None] = [None] * len(graph.tensors)
        self.reshards = reshards
        self.iterations = sweeps
        self.rule_calls = rule_calls  # the rules' runs (a replayed block runs none)
        self.converged = converged
        #: block visits replayed from an earlier identical block (``completion_blocks``)
        self.blocks_replayed = blocks_replayed
        self._plans: tuple[ReshardPlan | ReshardError, ...] | None = None
        self._counts: tuple[int, int, int] | None = None

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
            o = self._provenance.origin_of(t)
            self._origin_cache[t.order] = o
        return o

    @property
    def origins(self) -> dict[str, Origin]:
        """Every tensor's origin, by name (the explanation index)."""
        return without_gc(lambda: {t.name: self._origin(t) for t in self.graph.tensors})

    def _offer(self, raw: RawOffer, i: int) -> Offer:
        k = self._provenance.op_of(raw, i)
        ops, tensors = self.graph.ops, self.graph.tensors
        return Offer(raw.attr, raw.rank, ops[k].name, k, KINDS[raw.kind],
                     None if raw.driver < 0 else tensors[self._provenance.driver(raw, i)].name)

    def offers(self, tensor: Tensor | str) -> tuple[Offer, ...]:
        """Every attribute an op offered the tensor (one per op and direction)."""
        i = self._t(tensor).order
        return tuple(self._offer(o, i) for o in self._state.offers_of(i))

    def rejected(self, tensor: Tensor | str) -> tuple[Rejected, ...]:
        """The offers that lost, each with its reason (see ``explain`` for the prose)."""
        t = self._t(tensor)
        out = [Rejected(self._offer(o, t.order), why, detail)  # type: ignore[arg-type]
               for o, why, detail in self._provenance.rejected_of(t.order)]
        seen = {(r.offer.op, r.offer.kind) for r in out}
        chosen = self._state.attr[t.order]
        origin = self._origin(t)
        for raw in self._state.offers_of(t.order):
            o = self._offer(raw, t.order)
            if o.attr == chosen or (o.op, o.kind) in seen or o.rank == WEAK_RANK:
                continue
            out.append(_why_lost(o, t, chosen, origin))
            seen.add((o.op, o.kind))
        # A consumer whose need differs but made no ranked offer (a one-operand op) still lost.
        for e in self.reshards_of(t):
            for op in dict.fromkeys(k for k, _ in e.consumers if e.side == "operand"
                                    and (k, "demand") not in seen):
                seen.add((op, "demand"))
                o = Offer(e.dst, WEAK_RANK, op, -1, "demand", None)
                out.append(_dropped_split(o, t, chosen) or Rejected(
                    o, "rule", f"{op}'s rule needs {e.dst.mapping_str()} given its other "
                    "operands"))
        return tuple(out)

    @cached_property
    def dropped(self) -> tuple[DroppedSplit, ...]:
        """The splits completion dropped, in op order (``completion.dropped``)."""
        return find_dropped(self._provenance.run, self.reshards, self.rejected)

    def reshards_of(self, tensor: Tensor | str) -> tuple[ReshardEdge, ...]:
        name = self._t(tensor).name
        return tuple(e for e in self.reshards if e.tensor == name)

    # ---- totals ----------------------------------------------------------------------------
    @property
    def num_annotated(self) -> int:
        return self._kind_counts()[0]

    @property
    def num_inferred(self) -> int:
        return self._kind_counts()[1]

    @property
    def num_default(self) -> int:
        return self._kind_counts()[2]

    def _kind_counts(self) -> tuple[int, int, int]:
        """The tensors whose origin is an annotation, an inference and a default: ``_origin``'s
        kinds, read off the state without building the origins (their names and drivers are
        most of a summary's time on large models)."""
        if self._counts is None:
            annotated = {i for i, _ in self.graph.annotations()}
            defaulted = self._provenance.defaulted
            st = self._state
            n_ann = n_inf = n_def = 0
            for i, (o, a, held) in enumerate(zip(self._origin_cache, st.attr, st.offers,
                                                 strict=True)):
                if o is not None:
                    kind = o.kind
                    if kind == "annotation":
                        n_ann += 1
                    elif kind == "default":
                        n_def += 1
                    else:
                        n_inf += 1
                elif i in defaulted:
                    n_def += 1
                elif i in annotated:
                    n_ann += 1
                elif held is not None and (
                        any(h.attr == a for h in held) if isinstance(held, list)
                        else held.attr == a):
                    n_inf += 1  # an offer of the chosen attribute: its kind
                else:
                    n_def += 1
            self._counts = (n_ann, n_inf, n_def)
        return self._counts

    def _planned(self) -> tuple[ReshardPlan | ReshardError, ...]:
        """Per reshard edge its plan, or why none reaches it (planned on first call, then kept)."""
        if self._plans is None:
            out: list[ReshardPlan | ReshardError] = []
            for e in self.reshards:
                try:
                    out.append(e.plan(self.cost))
                except ReshardError as err:
                    out.append(err)
            self._plans = tuple(out)
        return self._plans

    def plans(self) -> tuple[ReshardPlan, ...]:
        """One plan per reshard edge; a ``ReshardError`` names the first edge no plan reaches
        (``unplannable`` lists them all)."""
        plans = self._planned()
        for p in plans:
            if isinstance(p, ReshardError):
                raise p
        return tuple(p for p in plans if isinstance(p, ReshardPlan))

    def unplannable(self) -> list[tuple[ReshardEdge, str]]:
        """The reshard edges no plan reaches, with the planner's reason."""
        return [(e, str(p)) for e, p in zip(self.reshards, self._planned(), strict=True)
                if isinstance(p, ReshardError)]

    @property
    def unconverged(self) -> list[str]:
        """Tensors that changed more than MAX_CHANGES times (their offers kept overturning each
        other) and were frozen at their last attribute; the reshards make that state consistent.
        Empty when completion converged."""
        tensors = self.graph.tensors
        return [tensors[i].name for i in compress(range(len(tensors)), self._state.frozen)]

    @property
    def bytes_moved(self) -> int:
        return sum(p.total_bytes for p in self.plans())

    @property
    def time(self) -> float:
        """Seconds all reshards take under the cost model."""
        return sum(p.time for p in self.plans())

    def summary(self) -> str:
        """Totals, then one line per reshard with its steps and bytes."""
        return without_gc(self._summary)

    def _summary(self) -> str:
        g = self.graph
        lines = [
            f"completion of {g.name!r}: {g.num_ops} ops, {g.num_tensors} tensors",
            f"  annotated {self.num_annotated}, inferred {self.num_inferred}, "
            f"defaulted {self.num_default}; {self.iterations} sweeps, {self.rule_calls} rule calls"
            + (f", {self.blocks_replayed} repeated blocks replayed" if self.blocks_replayed else "")
            + ("" if self.converged else " (NOT converged)"),
        ]
        frozen = self.unconverged
        if frozen:
            shown = ", ".join(frozen[:10]) + (f" and {len(frozen) - 10} more" if len(frozen) > 10
                                              else "")
            lines.append(f"  not converged: {shown} changed more than {MAX_CHANGES} times (their "
                         "offers kept overturning each other) and kept their last attribute; "
                         "the reshards below make that state consistent")
        lines.extend(dropped_lines(self.dropped))
        # a carelessly annotated graph may have edges no plan reaches: list them, do not raise
        planned = list(zip(self.reshards, self._planned(), strict=True))
        ok = [p for _, p in planned if isinstance(p, ReshardPlan)]
        bad = len(planned) - len(ok)
        lines.append(f"  reshards {len(self.reshards)}, bytes moved "
                     f"{fmt_bytes(sum(p.total_bytes for p in ok))}, time "
                     f"{sum(p.time for p in ok) * 1e3:.3f} ms"
                     + (f"; {bad} with no plan (listed)" if bad else ""))
        lines += [f"  {memory(self)}", *([reshard_table(planned)] if planned else [])]
        return "\n".join(lines)

    def table(self, tensors: Iterable[Tensor | str] | None = None) -> str:
        """One row per tensor: name, shape, attribute, placements, origin."""
        rows = [("tensor", "shape", "attr", "placements", "origin")]
        chosen = self.graph.tensors if tensors is None else [self._t(t) for t in tensors]
        for t in chosen:
            a = self.attr(t)
            rows.append((t.name, str(list(t.shape)), a.mapping_str(),
                         "[" + ", ".join(map(repr, a.placements)) + "]",
                         origin_str(self._origin(t))))
        return table(rows)

    def __str__(self) -> str:
        return self.table() + "\n" + self.summary()

    def __repr__(self) -> str:
        return (f"Completion({self.graph.name!r}: {self.num_annotated} annotated, "
                f"{self.num_inferred} inferred, {len(self.reshards)} reshards)")


def _dropped_split(o: Offer, t: Tensor, chosen: DistAttr | None) -> Rejected | None:
    """``o`` lost because ``t``'s attribute splits it unevenly where ``o`` splits it evenly, so
    the rule of ``o``'s op drops that split; None if not."""
    if chosen is None or divisible(chosen, t.shape) or not divisible(o.attr, t.shape):
        return None
    return Rejected(o, "divisibility", f"{chosen.mapping_str()} does not split "
                    f"{list(t.shape)} evenly, so {o.op}'s rule drops that split")


def _why_lost(o: Offer, t: Tensor, chosen: DistAttr | None, origin: Origin) -> Rejected:
    """Why offer ``o`` of tensor ``t`` lost to ``chosen`` (``t``'s ``origin``)."""
    split = _dropped_split(o, t, chosen)
    if split is not None:
        return split
    ann = t.annotation
    if ann is not None and ann.is_fully_closed:
        return Rejected(o, "annotation", "the annotation is closed")
    if o.rank < origin.rank:
        return Rejected(
            o, "priority",
            f"it carried priority {priority(o.rank)}"
            + ("" if is_annotation(o.rank) else " (inferred)")
            + f" against {priority(origin.rank)}"
            + (" (annotation)" if is_annotation(origin.rank) else ""))
    return Rejected(o, "cost", "same priority, but its reshards on this tensor's edges cost "
                               "more (or tie and lose the order)")


class Run:
    """The driver: sweeps until nothing changes, then the result, its origins and reshards.

    Its parts, each with one job: ``RunState`` (what the run reads, and the specs), ``Rules``
    (calling the ops' rules), ``Worklists`` (which ops to visit) and ``Sweeps`` (the visits)."""

    def __init__(self, graph: Graph, cost: CostModel,
                 plain_ops: frozenset[int] = frozenset()) -> None:
        self.state = state = RunState(graph, cost, plain_ops)
        self.rules = Rules(state)
        self.work = Worklists(len(state.ops), state.consumers, state.queued)
        self.sweeps = Sweeps(state, self.rules, self.work)
        self.defaulted: set[int] = set()

    def run(self) -> Completion:
        state, work = self.state, self.work
        st = state.st
        n = len(state.ops)
        # every op but the constants (see ``Index.queued``)
        work.fwd_next = bytearray(b"\x01") * n
        for k in state.constants:
            work.fwd_next[k] = 0
        self.seed_annotations()
        sweeps = 0
        converged = True
        while work.any_queued():
            if sweeps >= MAX_SWEEPS:
                converged = False
                break
            sweeps += 1
            fwd, work.fwd_next = work.fwd_next, bytearray(n)
            self.sweeps.sweep(fwd, 1)
            rev, work.rev_next = work.rev_next, bytearray(n)
            self.sweeps.sweep(rev, -1)
            if not work.any_queued():
                self.place_unreached()
        if any(st.frozen):
            converged = False
        # What each op needs from its final operands: already there at convergence (any change
        # re-queues the consumers); after a cut-off, recomputed so the reshards are consistent.
        for k in ([k for k, need in enumerate(st.needs) if need is None] if converged
                  else range(n)):
            self.forward_needs_only(k)
        state.g.set_attrs(st.attr)
        return Completion(state.g, state.cost, st, Provenance(state, self.defaulted),
                          reshard_edges(state), sweeps, self.rules.rule_calls, converged,
                          self.sweeps.replays)

    def seed_annotations(self) -> None:
        """The annotated tensors take their annotations' attributes, and their producers are
        queued in reverse."""
        state = self.state
        st, keys, queued, rev_next = state.st, state.ann_keys, state.queued, self.work.rev_next
        for i, ann in state.annotated:
            st.attr[i] = (keys[i] or ann).attr if keys else ann.attr
            st.rank[i] = annotation(ann.priority)
            if queued[i] >= 0:
                rev_next[queued[i]] = 1

    def place_unreached(self) -> None:
        """Sources no annotation reaches are replicated on the default mesh, and propagation
        resumes from them. So are values whose every offer was refused (an uneven split and
        nothing else), on the mesh of those offers: their consumers took them replicated."""
        state = self.state
        st, shapes, changed = state.st, state.shapes, self.work.changed
        for i in state.sources:
            if st.attr[i] is None:
                st.attr[i] = DistAttr.replicated(state.default_mesh, len(shapes[i]))
                self.defaulted.add(i)
                changed(i)
        for i in [i for i, r in enumerate(st.rejected) if r is not None]:
            if st.attr[i] is None:
                mesh = st.offers_of(i)[0].attr.mesh
                st.attr[i] = DistAttr.replicated(mesh, len(shapes[i]))
                self.defaulted.add(i)
                changed(i)

    def forward_needs_only(self, k: int) -> None:
        state = self.state
        st = state.st
        for i in state.ins[k] + state.outs[k]:
            if st.attr[i] is None:  # only values downstream of nothing at all
                st.attr[i] = DistAttr.replicated(state.default_mesh, state.tensors[i].ndim)
        mesh, _, _ = state.best_known(state.ins[k])
        self.sweeps.run_forward(k, mesh)


def complete(graph: Graph, cost: CostModel = DEFAULT_COST_MODEL) -> Completion:
    """Complete every tensor's attribute from the graph's annotations (module docs). Writes
    ``tensor.attr`` for every tensor (never ``tensor.annotation``) and returns the ``Completion``
    with origins, reshards and totals. Running it again gives the same result."""
    if not isinstance(graph, Graph):
        raise CompletionError(f"complete: expected a Graph, got {type(graph).__name__}")
    graph.validate()
    with stage("complete", total=len(graph.ops)):
        result = proven(graph, lambda plain_ops: without_gc(Run(graph, cost, plain_ops).run))
    warn_dropped(result.dropped)  # one ``DroppedSplitWarning`` each; ``summary()`` lists them
    return result
