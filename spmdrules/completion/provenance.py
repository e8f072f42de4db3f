"""Provenance: a finished run's offers read back in names (which op made each, which tensor
drove it, why a refusal lost) and each tensor's origin."""

from __future__ import annotations

from spmdrules.completion.offers import KINDS, REV, RawOffer, origin_key
from spmdrules.completion.rank import annotation
from spmdrules.completion.result import Origin
from spmdrules.completion.run_state import RunState
from spmdrules.graph.nodes import Tensor


class Provenance:
    """Where the offers and attributes of a finished run came from."""

    def __init__(self, run: RunState, defaulted: set[int]) -> None:
        self.run = run
        #: the tensors the pass placed replicated, no annotation or offer reaching them
        self.defaulted = defaulted

    def op_of(self, o: RawOffer, i: int) -> int:
        """The op that made offer ``o`` to tensor ``i``."""
        return o.op + self.run.base[i]

    def driver(self, o: RawOffer, i: int) -> int:
        """The tensor that drove offer ``o`` to tensor ``i`` (the offer must have one)."""
        run = self.run
        return (run.outs if o.kind == REV else run.ins)[self.op_of(o, i)][o.driver]

    def rejected_of(self, i: int) -> list[tuple[RawOffer, str, str]]:
        """Tensor ``i``'s refused offers: (offer, reason, detail)."""
        run = self.run
        out = []
        for o, why, detail, kept in run.st.rejected[i] or ():
            if kept >= 0:
                name = run.tensors[run.ins[self.op_of(o, i)][kept]].name
                detail = f"{detail} {name} and reshards this operand"
            elif kept <= -2:  # a result its annotation fixes (``Rules.settle_conflict``)
                name = run.tensors[run.outs[self.op_of(o, i)][-2 - kept]].name
                detail = f"{detail} its result {name} as annotated and reshards this operand"
            out.append((o, why, detail))
        return out

    def origin_of(self, t: Tensor) -> Origin:
        """Where tensor ``t``'s attribute came from: its annotation, the offer of its attribute
        that ranks highest (ties: ``origin_key``), or the default."""
        run = self.run
        st = run.st
        if t.order in self.defaulted:
            return Origin("default")
        a = st.attr[t.order]
        best: RawOffer | None = None
        for o in st.offers_of(t.order):
            if o.attr == a and (best is None or o.rank > best.rank
                                or (o.rank == best.rank and origin_key(o) < origin_key(best))):
                best = o
        ann = t.annotation
        name = None if best is None else run.ops[self.op_of(best, t.order)].name
        drv = (None if best is None or best.driver < 0
               else run.tensors[self.driver(best, t.order)].name)
        if ann is not None:
            rank = annotation(ann.priority)
            if a == ann.attr or best is None:
                return Origin("annotation", rank=rank)
            return Origin("annotation", name, drv, rank,
                          f"open dims from {KINDS[best.kind]} via {name}")
        if best is None:
            return Origin("default")
        return Origin(KINDS[best.kind], name, drv, st.rank[t.order])
