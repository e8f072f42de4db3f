"""The completion pass: ``complete(graph)`` sweeps until nothing changes, then builds the result."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from functools import cached_property
from itertools import compress
from typing import Any, Literal

from spmdrules.completion.cost import DEFAULT_COST_MODEL, CostModel
from spmdrules.completion.dropped import dropped_lines, find_dropped, warn_dropped
from spmdrules.completion.masks import only_unmasked, proven
from spmdrules.completion.memory import memory
from spmdrules.completion.offers import RawOffer
from spmdrules.completion.planning import Plan, ReshardError, divisible, fmt_bytes
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
from spmdrules.completion.state import (
    KINDS,
    MAX_CHANGES,
    MAX_SWEEPS,
    REV,
    State,
    origin_key,
)
from spmdrules.completion.sweeps import Sweeps
from spmdrules.core.attr import DistAttr
from spmdrules.core.bulk import without_gc
from spmdrules.core.progress import stage
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Tensor

#: (tensor, op, side, src, dst, slot): one reshard edge by index; ``slot`` is the operand's (or
#: result's) position among the op's flattened operands (results), so that an op taking one
#: tensor in two slots gets one edge per slot
RawEdge = tuple[int, int, Literal["operand", "result"], DistAttr, DistAttr, int]


class Completion:
    """The result of ``complete(graph)``: every tensor's attribute and origin, the reshards, and
    totals. ``str(result)`` is a table; ``summary()`` is the totals and the reshards."""

    def __init__(
        self,
        graph: Graph,
        cost: CostModel,
        state: State,
        run: Run,
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
        self._plans: tuple[Plan | ReshardError, ...] | None = None
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
            o = self._run.origin_of(t)
            self._origin_cache[t.order] = o
        return o

    @property
    def origins(self) -> dict[str, Origin]:
        """Every tensor's origin, by name (the explanation index)."""
        return without_gc(lambda: {t.name: self._origin(t) for t in self.graph.tensors})

    def _offer(self, raw: RawOffer, i: int) -> Offer:
        a, rank, _, kind, drv = raw
        k = self._run.op_of(raw, i)
        ops, tensors = self.graph.ops, self.graph.tensors
        return Offer(a, rank, ops[k].name, k, KINDS[kind],
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
            if o.attr == chosen or (o.op, o.kind) in seen or o.rank == WEAK_RANK:
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
            for op in dict.fromkeys(k for k, _ in e.consumers if e.side == "operand"
                                    and (k, "demand") not in seen):
                seen.add((op, "demand"))
                o = Offer(e.dst, WEAK_RANK, op, -1, "demand", None)
                out.append(Rejected(o, "divisibility", f"{chosen.mapping_str()} does not split "
                                    f"{list(t.shape)} evenly, so {op}'s rule drops that split")
                           if chosen is not None and not divisible(chosen, t.shape)
                           and divisible(e.dst, t.shape) else
                           Rejected(o, "rule", f"{op}'s rule needs {e.dst.mapping_str()} given "
                                    "its other operands"))
        return tuple(out)

    @cached_property
    def dropped(self) -> tuple[DroppedSplit, ...]:
        """The splits completion dropped, in op order (``completion.dropped``)."""
        return find_dropped(self._run, self.reshards, self.rejected)

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
            defaulted = self._run.defaulted
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
                        any(h[0] == a for h in held) if type(held) is list else held[0] == a):
                    n_inf += 1  # an offer of the chosen attribute: its kind
                else:
                    n_def += 1
            self._counts = (n_ann, n_inf, n_def)
        return self._counts

    def _planned(self) -> tuple[Plan | ReshardError, ...]:
        """Per reshard edge its plan, or why none reaches it (planned on first call, then kept)."""
        if self._plans is None:
            out: list[Plan | ReshardError] = []
            for e in self.reshards:
                try:
                    out.append(e.plan(self.cost))
                except ReshardError as err:
                    out.append(err)
            self._plans = tuple(out)
        return self._plans

    def plans(self) -> tuple[Plan, ...]:
        """One plan per reshard edge; a ``ReshardError`` names the first edge no plan reaches
        (``unplannable`` lists them all)."""
        plans = self._planned()
        for p in plans:
            if isinstance(p, ReshardError):
                raise p
        return tuple(p for p in plans if isinstance(p, Plan))

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
        ok = [p for _, p in planned if isinstance(p, Plan)]
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


class Run(Sweeps):
    """The driver: sweeps until nothing changes, then the result, its origins and reshards."""

    # ---- driver -------------------------------------------------------------------------------
    def run(self) -> Completion:
        st = self.st
        defaulted: set[int] = set()
        n = len(self.ops)
        # every op but the constants (see ``Index.queued``)
        self.fwd_next = bytearray(b"\x01") * n
        for k in self.constants:
            self.fwd_next[k] = 0
        keys = self.ann_keys
        for i, ann in self.annotated:
            st.attr[i] = (keys[i] or ann).attr if keys else ann.attr
            st.rank[i] = 2 * ann.priority + 1
            if self.queued[i] >= 0:
                self.rev_next[self.queued[i]] = 1
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
                for i in [i for i, r in enumerate(st.rejected) if r is not None]:
                    if st.attr[i] is None:
                        mesh = st.offers_of(i)[0][0].mesh
                        st.attr[i] = DistAttr.replicated(mesh, len(self.shapes[i]))
                        defaulted.add(i)
                        self.changed(i)
        if any(st.frozen):
            converged = False
        # What each op needs from its final operands: already there at convergence (any change
        # re-queues the consumers); after a cut-off, recomputed so the reshards are consistent.
        for k in ([k for k, need in enumerate(st.needs) if need is None] if converged
                  else range(n)):
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

    def rejected_of(self, i: int) -> list[tuple[RawOffer, str, str]]:
        """Tensor ``i``'s refused offers: (offer, reason, detail)."""
        out = []
        for o, why, detail, kept in self.st.rejected[i] or ():
            if kept >= 0:
                name = self.tensors[self.ins[self.op_of(o, i)][kept]].name
                detail = f"{detail} {name} and reshards this operand"
            out.append((o, why, detail))
        return out

    def op_of(self, o: RawOffer, i: int) -> int:
        """The op that made offer ``o`` to tensor ``i``."""
        return o[2] + self.base[i]

    def driver(self, o: RawOffer, i: int) -> int:
        """The tensor that drove offer ``o`` to tensor ``i`` (the offer must have one)."""
        return (self.outs if o[3] == REV else self.ins)[self.op_of(o, i)][o[4]]

    def origin_of(self, t: Tensor) -> Origin:
        st = self.st
        if t.order in self.defaulted:
            return Origin("default")
        a = st.attr[t.order]
        best: RawOffer | None = None
        for o in st.offers_of(t.order):
            if o[0] == a and (best is None or o[1] > best[1]
                              or (o[1] == best[1] and origin_key(o) < origin_key(best))):
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
                          f"open dims from {KINDS[best[3]]} via {name}")
        if best is None:
            return Origin("default")
        return Origin(KINDS[best[3]], name, drv, st.rank[t.order])

    def reshard_edges(self) -> tuple[ReshardEdge, ...]:
        """One edge per tensor and target layout, shared by its consumers (``shared``)."""
        tensors, ops = self.tensors, self.ops
        first: dict[int, list[int]] = {}  # tensor -> its operand edges' positions in ``out``
        shared: dict[int, list[tuple[str, int]]] = {}
        out: list[ReshardEdge] = []
        shapes = self.shapes
        for i, k, side, src, dst, slot in self.raw_edges():
            mine = first.setdefault(i, []) if side == "operand" else []
            at = next((j for j in mine if out[j].dst == dst), -1)
            if at >= 0:
                shared.setdefault(at, []).append((ops[k].name, slot))
                continue
            mine.append(len(out))
            t = tensors[i]
            out.append(ReshardEdge(t.name, ops[k].name, side, src, dst, shapes[i], t.dtype, slot))
        for at, more in shared.items():  # the first consumer's edge; the lowering runs it once
            out[at] = dataclasses.replace(out[at], shared=tuple(more))
        return tuple(out)

    def raw_edges(self) -> list[RawEdge]:
        """(tensor, op, side, src, dst, slot) of every reshard edge, in op order. A repeated block
        whose attributes and rule answers are an earlier block's has that block's edges."""
        st = self.st
        attrs, needs, natural = st.attr, st.needs, st.natural
        blocks, block_of = self.blocks, self.block_of
        out: list[RawEdge] = []
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
                for j, dk, side, src, dst, slot in prev[1]:
                    out.append((blk.tensors[j], blk.start + dk, side, src, dst, slot))
            else:
                mine: list[RawEdge] = []
                for kk in range(blk.start, blk.stop):
                    self.op_edges(kk, mine)
                local = {i: j for j, i in enumerate(blk.tensors)}
                seen[blk.run] = (key, [(local[i], kk - blk.start, side, src, dst, slot)
                                       for i, kk, side, src, dst, slot in mine])
                out.extend(mine)
            k = blk.stop
        return out

    def op_edges(self, k: int, out: list[RawEdge]) -> None:
        st = self.st
        attrs = st.attr
        need, nat = st.needs[k], st.natural[k]
        assert need is not None and nat is not None
        for slot, (i, n) in enumerate(zip(self.ins[k], need, strict=True)):
            a = attrs[i]
            if a is not n and a != n and not (a is not None and only_unmasked(a, n)):
                assert a is not None
                out.append((i, k, "operand", a, n, slot))
        for slot, (i, n) in enumerate(zip(self.outs[k], nat, strict=True)):
            a = attrs[i]
            if a is not n and a != n and not (a is not None and only_unmasked(n, a)):
                assert a is not None
                out.append((i, k, "result", n, a, slot))


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
