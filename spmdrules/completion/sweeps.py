"""Visiting ops: forward, reverse and demand offers, the choice among them, and sweeps."""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.completion.blocks import Visit, close, entry_head, matches, open_visit
from spmdrules.completion.blocks import replay as replay_block
from spmdrules.completion.conflicts import Rules
from spmdrules.completion.masks import only_unmasked
from spmdrules.completion.offers import (
    DEM,
    FWD,
    REV,
    RawOffer,
    Refusal,
    holds,
    offer_key,
    project,
    put_offer,
)
from spmdrules.completion.rank import WEAK, annotation, inferred
from spmdrules.completion.reshard_plans import fitting, reshard_time
from spmdrules.completion.run_state import RunState
from spmdrules.completion.state import MAX_CHANGES, RECENT_VISITS
from spmdrules.completion.worklist import Worklists
from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.graph.nodes import Tensor


class Sweeps:
    """Visiting ops: offers from forward, reverse and demand, their choice, and the sweeps. It
    reads and writes the run's state (``run``), calls the rules through ``rules`` and queues
    ops on ``work``."""

    def __init__(self, run: RunState, rules: Rules, work: Worklists) -> None:
        self.run, self.rules, self.work = run, rules, work
        # the arrays and entry points a visit reads, held here: a visit reads them thousands
        # of times per model
        self.st, self.ins, self.outs, self.base = run.st, run.ins, run.outs, run.base
        self.shapes, self.ann, self.consumers = run.shapes, run.ann, run.consumers
        self.tensors, self.cost, self.is_shared = run.tensors, run.cost, run.is_shared
        self.blocks, self.block_of = run.blocks, run.block_of
        self.spec_at, self.best_known, self.is_fitting = run.spec_at, run.best_known, run.is_fitting
        self.settled, self.given = rules.settled, rules.given
        self.changed = work.changed
        self.replays = 0  # block visits replayed (``completion_blocks``)

    # ---- visiting -----------------------------------------------------------------------------
    def forward(self, k: int) -> None:
        st = self.st
        ins = self.ins[k]
        mesh, driver, drank = self.best_known(ins)
        if driver < 0:
            return  # nothing known yet; a later change re-queues the op
        need, outs = self.run_forward(k, mesh)
        out_rank = inferred(drank)
        offer = self.offer
        base = self.base
        for i, a in zip(self.outs[k], outs, strict=True):
            offer(i, RawOffer(a, out_rank, k - base[i], FWD, driver))
        if len(ins) == 1:
            # A one-operand op's need depends on its operand alone, which vouches for it with its
            # own rank: the need (a pending sum reduced, a split gathered) is then one of the
            # tensor's options, priced with its other consumers', so that a sum several such
            # consumers need reduced is reduced once, where that is cheapest.
            # A need the operand meets is left unsaid (most one-operand ops take any layout,
            # and an offer more per tensor slows every sweep): ``edge_cost`` asks such consumers
            # itself. One said before is replaced, so that none is stale.
            i, n = ins[0], need[0]
            cur = st.attr[i]
            if (n is not cur and n != cur) or holds(st.offers[i], k - base[i], DEM):
                offer(i, RawOffer(n, inferred(st.rank[i]), k - base[i], DEM, -1))
            return
        # A demand carries the rank of the op's best *other* known operand: an operand does not
        # vouch for the attribute the op asks of itself.
        attrs, ranks = st.attr, st.rank
        for pos, i in enumerate(ins):
            best, best_r = -1, WEAK
            for q, j in enumerate(ins):
                if j != i and attrs[j] is not None and ranks[j] > best_r:
                    best, best_r = q, ranks[j]
            offer(i, RawOffer(need[pos], WEAK if best < 0 else inferred(best_r), k - base[i],
                              DEM, best))

    def run_forward(
        self, k: int, mesh: ProcessMesh
    ) -> tuple[tuple[DistAttr, ...], tuple[DistAttr, ...]]:
        """Op ``k``'s forward rule on its operands' current attributes: what it needs of its
        operands and what it makes, remembered for the reshard edges."""
        st = self.st
        if not self.ins[k]:
            # a constant makes its results as they were placed (see Index.sources)
            placed = [st.attr[i] for i in self.outs[k]]
            outs = tuple(DistAttr.replicated(mesh, len(self.shapes[i])) if a is None
                         else a.without_partial() for i, a in zip(self.outs[k], placed, strict=True))
            st.needs[k], st.natural[k] = (), outs
            return (), outs
        ins = self.ins[k]
        spec_at, attrs = self.spec_at, st.attr
        try:
            need, outs, _ = self.settled(k, mesh, [spec_at(i, mesh) for i in ins],
                                         [attrs[i] is not None for i in ins])
        except SpmdError as e:
            need, outs = self.rules.settle_conflict(self.run.ops[k], mesh, e)
        st.needs[k] = need
        st.natural[k] = outs
        return need, outs

    def reverse(self, k: int) -> None:
        st = self.st
        nat = st.natural[k]
        outs = self.outs[k]
        attrs = st.attr
        if nat is not None and all(
            attrs[i] is None or attrs[i] == n for i, n in zip(outs, nat, strict=True)
        ):
            return  # the results are what the op makes: nothing to push upstream
        if not self.rules.has_reverse(k):
            return
        mesh, driver, drank = self.best_known(outs)
        if driver < 0:
            return
        try:
            need = self.rules.reverse(k, mesh)
        except SpmdError:
            return  # the reverse rule refuses: the forward answer stands and the edge reshards
        rank = inferred(drank)
        offer, base = self.offer, self.base
        for i, a in zip(self.ins[k], need, strict=True):
            cur = attrs[i]
            if cur is not None and cur.mask_items and only_unmasked(cur, a):
                a = cur  # the masked sum serves as it is (completion/masks.py)
            offer(i, RawOffer(a, rank, k - base[i], REV, driver))

    # ---- choosing -----------------------------------------------------------------------------
    def offer(self, i: int, o: RawOffer) -> None:
        st = self.st
        n = put_offer(st.offers, i, o)
        cur = st.attr[i]
        if cur is not None and o.rank <= st.rank[i] and o.attr == cur:
            return  # agrees with what the tensor has: nothing can change
        ann = self.ann[i]
        if (ann is not None and ann.is_fully_closed) or st.frozen[i]:
            return
        if self.is_shared[i]:
            st.touched_shared = True  # the visit open now cannot be replayed (``blocks``)
        new: DistAttr | None
        if cur is None and ann is None and n == 1 and self.is_fitting(o.attr, self.shapes[i]):
            new, rank = o.attr, o.rank  # the first offer to an unknown tensor (the common case)
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

    def choose(self, i: int, offers: Sequence[RawOffer]) -> tuple[DistAttr | None, int]:
        """Tensor ``i``'s attribute and rank from its offers, by the policy (module docs)."""
        ann = self.ann[i]
        valid = self.fitting_offers(i, offers)
        if not valid:
            return (None, WEAK) if ann is None else (ann.attr, annotation(ann.priority))
        top = max(o.rank for o in valid)
        cands = sorted((o for o in valid if o.rank == top), key=offer_key)
        rank = top if ann is None else max(top, annotation(ann.priority))
        first = cands[0].attr
        if all(o.attr == first for o in cands):
            return first, rank
        return self.cheapest(i, self.options(i, cands, valid), valid), rank

    def fitting_offers(self, i: int, offers: Sequence[RawOffer]) -> list[RawOffer]:
        """Tensor ``i``'s offers as it can take them: seen through its annotation, without the
        splits that do not fit; the offers that lose anything are recorded as refused."""
        st = self.st
        ann = self.ann[i]
        shape = self.shapes[i]
        valid: list[RawOffer] = []
        for o in offers:
            a = o.attr if ann is None else project(ann, o.attr, o.rank)
            if a is None or not (ann is not None or self.is_fitting(a, shape)):
                if a is not None:
                    # An offer loses only the splits that leave a process an empty block. A
                    # consumer's demand: whether its rule asks for one depends on the tensor's
                    # own layout, so refusing the whole demand let the tensor's choice remove
                    # the offers it chose from (issue 16). A producer's or a reverse offer: the
                    # batch split stays where the spatial dim beside it collapses (issue 24).
                    valid.append(o._replace(attr=fitting(a, shape)))
                if not any(r.offer == o for r in st.rejected[i] or ()):
                    st.reject(i, Refusal(o, "divisibility", "a split dim is shorter than its "
                                         "pieces, which would leave a process an empty block", -1)
                              if a is not None else
                              Refusal(o, "annotation", "it is on another mesh than the annotation",
                                      -1))
                continue
            valid.append(o if a is o.attr else o._replace(attr=a))
        return valid

    def options(self, i: int, cands: list[RawOffer], valid: list[RawOffer]) -> list[DistAttr]:
        """The attributes tensor ``i`` chooses among, from its offers ``cands`` of equal rank.

        A demand is taken as what its op would need given its *other* operands and, for this
        tensor, what its producer offers (or nothing): the demand the op made to the current
        attribute changes with that attribute (a concat asks its operand to keep a split, or
        to drop it), so choosing among those let a tensor's own choice change what it chose
        from, and oscillate (issue 16). Asking with the producer's offer keeps the dims the
        op is indifferent to (a batch split that the weights know nothing of)."""
        ann = self.ann[i]
        made = [o.attr for o in valid if o.kind == FWD]
        options: list[DistAttr] = []
        for o in cands:
            if o.kind != DEM:
                if o.attr not in options:
                    options.append(o.attr)
                continue
            asked = False
            for base in (*made, None):
                asked_of = self.given(o.op + self.base[i], i, base)
                if asked_of is None:
                    continue
                # a split the op asks for that leaves a process an empty block is one the
                # tensor cannot take: the rest of the demand still counts
                given: DistAttr | None = (fitting(asked_of[0], self.shapes[i]) if ann is None
                                          else project(ann, asked_of[0], o.rank))
                if given is not None:
                    asked = True
                    if given not in options:
                        options.append(given)
            if not asked and o.attr not in options:
                options.append(o.attr)
        return options

    def cheapest(self, i: int, options: list[DistAttr], valid: list[RawOffer]) -> DistAttr:
        """The option of least communication over tensor ``i``'s edges.

        At equal cost, a tensor read by several ops takes fewer pending sums: reduced where it
        is made, the sum reaches every consumer settled; left pending, it is reduced for the
        consumers that need it and flows on, pending, through the others (a norm's x * rsqrt)
        to be reduced again. With one consumer, both are one reduction."""
        several = len(self.consumers[i]) > 1
        best: tuple[float, int, DistAttr] | None = None
        for a in options:
            key = (self.edge_cost(self.tensors[i], a, valid),
                   len(a.partial_items) if several else 0)
            if best is None or key < best[:2]:
                best = (*key, a)
        assert best is not None
        return best[2]

    def edge_cost(self, t: Tensor, v: DistAttr, offers: list[RawOffer]) -> float:
        """Seconds of the reshards on ``t``'s edges if ``t`` were ``v``: from what its producer
        makes, and to what each consumer would need of ``v`` (its demand, else its reverse
        offer).

        A consumer's demand is its rule's answer with ``t`` as it is now; what the rule asks of
        ``v`` may differ (a concat or an elementwise op merges its operands' splits, ``t``'s
        own included), so the demand is asked again with ``t`` as ``v``, and what that answer
        forces on the consumer's other operands counts too (``Rules.given``): a layout that
        costs ``t`` nothing but has a weight gathered is not free. Consumers needing one
        layout share its reshard, so each distinct need is priced once. Pricing ``v`` against
        the demand made to the current attribute is what let two tensors oscillate for ever:
        each choice changed the demands so that the other choice looked cheaper (issue 16)."""
        total = 0.0
        by_op: dict[int, RawOffer] = {}
        for o in offers:
            if o.kind == FWD:
                total += reshard_time(o.attr, v, t.shape, t.dtype, self.cost)
            elif o.kind == DEM or o.op not in by_op:
                by_op[o.op] = o
        needs: set[DistAttr] = set()
        base, i = self.base[t.order], t.order
        given = self.given
        for o in by_op.values():
            need = o.attr
            if o.kind == DEM:
                asked = given(o.op + base, i, v)
                if asked is not None:
                    need = asked[0]
                    total += asked[1]
            needs.add(need)
        ins = self.ins
        for k in self.consumers[i]:  # one-operand consumers content with ``t`` made no offer
            if len(ins[k]) == 1 and k - base not in by_op:
                asked = given(k, i, v)
                if asked is not None:
                    needs.add(asked[0])
        # consumers needing one layout share one reshard (``edges.reshard_edges``): priced once
        for need in needs:
            total += reshard_time(v, need, t.shape, t.dtype, self.cost)
        return total

    def sweep(self, pending: bytearray, direction: int) -> None:
        """Visit the pending ops in order (forward: ascending), including those queued ahead of
        the cursor during the sweep."""
        work = self.work
        work.direction = direction
        work.pending = pending
        forward = direction == 1
        if self.blocks:
            self.sweep_blocks(pending, forward)
        else:
            visit = self.forward if forward else self.reverse
            find = pending.find if forward else pending.rfind
            k = find(1)
            while k >= 0:
                pending[k] = 0
                work.cur = k
                visit(k)
                k = find(1, k + 1) if forward else find(1, 0, k)
        work.cur = -1 if forward else len(self.run.ops)

    def sweep_blocks(self, pending: bytearray, forward: bool) -> None:
        """``sweep`` on a model with repeated blocks: a block entered in the state an earlier
        block of its run was entered in gets that block's changes instead of its visits (see
        ``completion_blocks``)."""
        visit = self.forward if forward else self.reverse
        find = pending.find if forward else pending.rfind
        block_of, blocks, st, base = self.block_of, self.blocks, self.st, self.base
        work = self.work
        flags = work.flags()
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
                    if not st.touched_shared:
                        close(st, open_, flags, base)
                        seen_before = recent.setdefault(open_.block.run, [])
                        seen_before.insert(0, open_)
                        del seen_before[RECENT_VISITS:]
                    open_ = None
                inside = b
                if b >= 0:
                    blk = blocks[b]
                    head = entry_head(st, self.run.ann_keys, blk, flags, base)
                    seen = next((v for v in recent.get(blk.run, ())
                                 if v.head == head and matches(st, blk, v)), None)
                    if seen is not None:
                        replay_block(st, blk, seen, flags, base)
                        self.replays += 1
                        inside = -1
                        k = find(1, blk.stop) if forward else find(1, 0, blk.start)
                        continue
                    open_ = open_visit(st, blk, head)
                    st.touched_shared = False
            pending[k] = 0
            work.cur = k
            visit(k)
            k = find(1, k + 1) if forward else find(1, 0, k)
        if open_ is not None and not st.touched_shared:
            close(st, open_, flags, base)
