"""Visiting ops: forward, reverse and demand offers, the choice among them, conflicts, and sweeps."""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.completion.blocks import Flags, Visit, close, entry_head, matches, open_visit
from spmdrules.completion.blocks import replay as replay_block
from spmdrules.completion.conflicts import Conflicts
from spmdrules.completion.masks import only_unmasked
from spmdrules.completion.offers import RawOffer, put_offer
from spmdrules.completion.planning import fitting, reshard_time
from spmdrules.completion.result import WEAK_RANK
from spmdrules.completion.state import (
    DEM,
    FWD,
    MAX_CHANGES,
    RECENT_VISITS,
    REV,
    offer_key,
    project,
)
from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.graph.nodes import Tensor


class Sweeps(Conflicts):
    """Visiting ops: offers from forward, reverse and demand, their choice, and the sweeps."""

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
            offer(i, (a, out_rank, k - base[i], FWD, driver))
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
            if (n is not cur and n != cur) or self.holds(i, k - base[i], DEM):
                offer(i, (n, (st.rank[i] >> 1) << 1, k - base[i], DEM, -1))
            return
        # A demand carries the rank of the op's best *other* known operand: an operand does not
        # vouch for the attribute the op asks of itself.
        attrs, ranks = st.attr, st.rank
        for pos, i in enumerate(ins):
            best, best_r = -1, WEAK_RANK
            for q, j in enumerate(ins):
                if j != i and attrs[j] is not None and ranks[j] > best_r:
                    best, best_r = q, ranks[j]
            offer(i, (need[pos], WEAK_RANK if best < 0 else (best_r >> 1) << 1, k - base[i], DEM,
                      best))

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
            need, outs = self.settle_conflict(self.ops[k], mesh, e)
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
        attrs = self.st.attr
        for i, a in zip(self.ins[k], need, strict=True):
            cur = attrs[i]
            if cur is not None and cur._masks and only_unmasked(cur, a):
                a = cur  # the masked sum serves as it is (completion/masks.py)
            offer(i, (a, rank, k - base[i], REV, driver))

    # ---- choosing -----------------------------------------------------------------------------
    def offer(self, i: int, o: RawOffer) -> None:
        st = self.st
        n = put_offer(st.offers, i, o)
        cur = st.attr[i]
        if cur is not None and o[1] <= st.rank[i] and o[0] == cur:
            return  # agrees with what the tensor has: nothing can change
        ann = self.ann[i]
        if (ann is not None and ann.is_fully_closed) or st.frozen[i]:
            return
        if self.is_shared[i]:
            self.touched_shared = True  # the visit open now cannot be replayed (``blocks``)
        new: DistAttr | None
        if cur is None and ann is None and n == 1 and self.is_fitting(o[0], self.shapes[i]):
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

    def choose(self, i: int, offers: Sequence[RawOffer]) -> tuple[DistAttr | None, int]:
        """Tensor ``i``'s attribute and rank from its offers, by the policy (module docs)."""
        st = self.st
        ann = self.ann[i]
        valid: list[RawOffer] = []
        for o in offers:
            a = o[0] if ann is None else project(ann, o[0], o[1])
            if a is None or not (ann is not None or self.is_fitting(a, self.shapes[i])):
                if a is not None:
                    # An offer loses only the splits that leave a process an empty block. A
                    # consumer's demand: whether its rule asks for one depends on the tensor's
                    # own layout, so refusing the whole demand let the tensor's choice remove
                    # the offers it chose from (issue 16). A producer's or a reverse offer: the
                    # batch split stays where the spatial dim beside it collapses (issue 24).
                    valid.append((fitting(a, self.shapes[i]), o[1], o[2], o[3], o[4]))
                if not any(r[0] == o for r in st.rejected[i] or ()):
                    st.reject(i, (o, "divisibility", "a split dim is shorter than its pieces, "
                                  "which would leave a process an empty block", -1)
                              if a is not None else
                              (o, "annotation", "it is on another mesh than the annotation", -1))
                continue
            valid.append(o if a is o[0] else (a, o[1], o[2], o[3], o[4]))
        if not valid:
            return (None, WEAK_RANK) if ann is None else (ann.attr, 2 * ann.priority + 1)
        top = max(o[1] for o in valid)
        cands = sorted((o for o in valid if o[1] == top), key=offer_key)
        rank = top if ann is None else max(top, 2 * ann.priority + 1)
        first = cands[0][0]
        if all(o[0] == first for o in cands):
            return first, rank
        # Equal rank, different attributes: least communication over the tensor's edges. A
        # demand is taken as what its op would need given its *other* operands and, for this
        # tensor, what its producer offers (or nothing): the demand the op made to the current
        # attribute changes with that attribute (a concat asks its operand to keep a split, or
        # to drop it), so choosing among those let a tensor's own choice change what it chose
        # from, and oscillate (issue 16). Asking with the producer's offer keeps the dims the
        # op is indifferent to (a batch split that the weights know nothing of).
        made = [o[0] for o in valid if o[3] == FWD]
        options: list[DistAttr] = []
        for o in cands:
            if o[3] != DEM:
                if o[0] not in options:
                    options.append(o[0])
                continue
            asked = False
            for base in (*made, None):
                asked_of = self.given(o[2] + self.base[i], i, base)
                if asked_of is None:
                    continue
                # a split the op asks for that leaves a process an empty block is one the
                # tensor cannot take: the rest of the demand still counts
                given: DistAttr | None = (fitting(asked_of[0], self.shapes[i]) if ann is None
                                          else project(ann, asked_of[0], o[1]))
                if given is not None:
                    asked = True
                    if given not in options:
                        options.append(given)
            if not asked and o[0] not in options:
                options.append(o[0])
        # At equal cost, a tensor read by several ops takes fewer pending sums: reduced where it
        # is made, the sum reaches every consumer settled; left pending, it is reduced for the
        # consumers that need it and flows on, pending, through the others (a norm's x * rsqrt)
        # to be reduced again. With one consumer, both are one reduction.
        several = len(self.consumers[i]) > 1
        best: tuple[float, int, DistAttr] | None = None
        for a in options:
            key = (self.edge_cost(self.tensors[i], a, valid),
                   len(a.partial_items) if several else 0)
            if best is None or key < best[:2]:
                best = (*key, a)
        assert best is not None
        return best[2], rank

    def edge_cost(self, t: Tensor, v: DistAttr, offers: list[RawOffer]) -> float:
        """Seconds of the reshards on ``t``'s edges if ``t`` were ``v``: from what its producer
        makes, and to what each consumer would need of ``v`` (its demand, else its reverse
        offer).

        A consumer's demand is its rule's answer with ``t`` as it is now; what the rule asks of
        ``v`` may differ (a concat or an elementwise op merges its operands' splits, ``t``'s
        own included), so the demand is asked again with ``t`` as ``v``, and what that answer
        forces on the consumer's other operands counts too (``Conflicts.given``): a layout that
        costs ``t`` nothing but has a weight gathered is not free. Consumers needing one
        layout share its reshard, so each distinct need is priced once. Pricing ``v`` against
        the demand made to the current attribute is what let two tensors oscillate for ever:
        each choice changed the demands so that the other choice looked cheaper (issue 16)."""
        total = 0.0
        by_op: dict[int, RawOffer] = {}
        for o in offers:
            if o[3] == FWD:
                total += reshard_time(o[0], v, t.shape, t.dtype, self.cost)
            elif o[3] == DEM or o[2] not in by_op:
                by_op[o[2]] = o
        needs: set[DistAttr] = set()
        base, i = self.base[t.order], t.order
        given = self.given
        for o in by_op.values():
            need = o[0]
            if o[3] == DEM:
                asked = given(o[2] + base, i, v)
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
        # consumers needing one layout share one reshard (``Run.reshard_edges``): priced once
        for need in needs:
            total += reshard_time(v, need, t.shape, t.dtype, self.cost)
        return total

    def holds(self, i: int, op: int, kind: int) -> bool:
        """Whether tensor ``i`` holds an offer of ``kind`` from op ``op`` (counted from its base)."""
        held = self.st.offers[i]
        if held is None:
            return False
        if type(held) is list:
            return any(p[2] == op and p[3] == kind for p in held)
        return bool(held[2] == op and held[3] == kind)

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
            p = self.queued[i]
            if p >= 0:
                self.rev_next[p] = 1
        else:
            fwd_next = self.fwd_next
            for c in self.consumers[i]:
                fwd_next[c] = 1
            p = self.queued[i]
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
        block_of, blocks, st, base = self.block_of, self.blocks, self.st, self.base
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
                    if not self.touched_shared:
                        close(st, open_, flags, base)
                        seen_before = recent.setdefault(open_.block.run, [])
                        seen_before.insert(0, open_)
                        del seen_before[RECENT_VISITS:]
                    open_ = None
                inside = b
                if b >= 0:
                    blk = blocks[b]
                    head = entry_head(st, self.ann_keys, blk, flags, base)
                    seen = next((v for v in recent.get(blk.run, ())
                                 if v.head == head and matches(st, blk, v)), None)
                    if seen is not None:
                        replay_block(st, blk, seen, flags, base)
                        self.replays += 1
                        inside = -1
                        k = find(1, blk.stop) if forward else find(1, 0, blk.start)
                        continue
                    open_ = open_visit(st, blk, head)
                    self.touched_shared = False
            pending[k] = 0
            self.cur = k
            visit(k)
            k = find(1, k + 1) if forward else find(1, 0, k)
        if open_ is not None and not self.touched_shared:
            close(st, open_, flags, base)
