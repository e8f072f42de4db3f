"""Conflicts settled by the cost: what an op needs of its operands when they disagree.

An op's rule settles operands that disagree by a fixed order (the matmul rule hands a contested
mesh dim to the batch letters first, the einsum engine to the first letter): that order never
sees what the answer forces on the operands. Completion prices it. When the rule's answer would
reshard an operand it was given, the rule is asked again with each known operand's layout left
free in turn (what the op needs given its *other* operands alone), and, for each result an
annotation fixes whole, what the op needs to make that result (its reverse rule's need, answered
again by its forward rule); the candidate whose reshards of the operands, and of the fixed
results from what the op makes, cost least wins; the rule's own answer wins ties. Every
candidate is a rule's answer: the rules stay as Paddle's, and the cost only picks among them.
The fixed results matter where an operand's split loses its mesh dim to another operand's
(a convolution given H and C_out on one mesh dim): the rule's answers then gather the operand
whole, run the op on more data than it needs and slice the result back to its annotation, where
the result's own need gathers only the contested dim.

When the rule refuses the operands together, ``settle_conflict`` keeps one of them (the
highest-ranked, then the cheapest) or a result the annotations fix whole, priced the same way,
and records why the others lost: keeping an operand whose split the op refuses (a transposed
convolution's input channels) gathers it and slices the result, a result-side reshard that
moves nothing, where resharding it into the split the result needs runs the op split.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from spmdrules.completion.masks import unmasked_needs
from spmdrules.completion.memo import FLAT_CACHE, FLAT_CACHE_MAX, Flattened, cached_spec
from spmdrules.completion.offers import DEM, RawOffer, Refusal
from spmdrules.completion.rank import WEAK
from spmdrules.completion.reshard_plans import reshard_time
from spmdrules.completion.result import UnresolvableConflictError
from spmdrules.completion.run_state import RunState
from spmdrules.core.attr import DistAttr
from spmdrules.core.errors import SpmdError
from spmdrules.core.mesh import ProcessMesh
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine.masks import plain
from spmdrules.graph.nodes import Op, Tensor
from spmdrules.graph.opschema import OpSchema

Answer = tuple[tuple[DistAttr, ...], tuple[DistAttr, ...]]


class Rules:
    """An op's rules called on operand specs, and the choice among their answers (module docs);
    counts the rules' runs."""

    def __init__(self, run: RunState) -> None:
        self.run = run
        self.st, self.ins, self.outs, self.ops = run.st, run.ins, run.outs, run.ops
        self.calls, self.shapes, self.base = run.calls, run.shapes, run.base
        self.tensors, self.cost, self.ann = run.tensors, run.cost, run.ann
        self.plain_ops, self.is_shared = run.plain_ops, run.is_shared
        self.spec_at, self.spec_fn = run.spec_at, run.spec_fn
        self.placeholder, self.best_known = run.placeholder, run.best_known
        self.rule_calls = 0  # the rules' runs (a replayed block runs none)

    def answer(self, k: int, mesh: ProcessMesh, specs: Sequence[TensorSpec]) -> Answer:
        """Op ``k``'s forward rule on ``specs`` (one per operand slot): what it needs of its
        operands and what it makes. Raises the rule's ``SpmdError``."""
        self.rule_calls += 1
        given = specs
        if self.plain_ops and k in self.plain_ops:
            specs = [plain(s) for s in specs]
        call = self.calls[k]
        if call is not None:
            need, outs = self.flat(k, call.schema, call.forward(*specs, *call.forward_tail))
        else:
            op = self.ops[k]
            full = self.spec_fn(mesh)
            n = len(specs)
            slots = itertools.count()  # by slot, not by tensor: an op may take one tensor twice

            def spec(t: Tensor) -> TensorSpec:
                p = next(slots)
                return specs[p] if p < n else full(t)  # a generic rule's results come after

            need, outs = self.flat(k, op.schema, op.rule.infer_forward(*op.forward_args(spec)))
        return unmasked_needs(given, need), outs

    def has_reverse(self, k: int) -> bool:
        """Whether op ``k``'s rule has a reverse."""
        call = self.calls[k]
        if call is not None and call.plain_results:
            return call.reverse is not None
        return self.ops[k].rule.has_reverse

    def reverse(self, k: int, mesh: ProcessMesh) -> tuple[DistAttr, ...]:
        """What op ``k``'s reverse rule needs of its operands, given its results' current
        attributes on ``mesh``. Raises the rule's ``SpmdError``."""
        self.rule_calls += 1
        call = self.calls[k]
        if call is not None and call.plain_results:
            assert call.reverse is not None
            spec = self.spec_at
            info = call.reverse(*[spec(i, mesh) for i in self.ins[k]],
                                *[spec(i, mesh) for i in self.outs[k]], *call.reverse_tail)
            return self.flat(k, call.schema, info)[0]
        op = self.ops[k]
        info = op.rule.infer_reverse(*op.reverse_args(self.spec_fn(mesh)))
        return self.flat(k, op.schema, info)[0]

    def flat(self, k: int, schema: OpSchema, info: SpmdInfo) -> Answer:
        """``op.flat_info(info)`` for op ``k``, memoised on the answer (see ``FLAT_CACHE``)."""
        n_in = len(self.ins[k])
        hit = FLAT_CACHE.get(id(info))
        if hit is not None and hit.info is info and hit.schema is schema and hit.n_in == n_in:
            return hit.ins, hit.outs
        ins, outs = self.ops[k].flat_info(info)
        if len(FLAT_CACHE) >= FLAT_CACHE_MAX:
            FLAT_CACHE.clear()
        FLAT_CACHE[id(info)] = Flattened(info, schema, n_in, ins, outs)
        return ins, outs

    def settled(
        self, k: int, mesh: ProcessMesh, specs: list[TensorSpec], known: Sequence[bool]
    ) -> tuple[tuple[DistAttr, ...], tuple[DistAttr, ...], float]:
        """What op ``k`` needs of its operands ``specs`` (``known[slot]``: laid out, not a
        placeholder) and what it makes, and the seconds of the operands' reshards: the rule's
        answer, or the cheapest answer with one known operand left free (module docs).
        Raises the rule's ``SpmdError`` if it refuses ``specs``."""
        need, outs = self.answer(k, mesh, specs)
        forced = False
        for s, n, kn in zip(specs, need, known, strict=True):
            a = s.attr
            if kn and a is not n and a != n:
                forced = True
                break
        if not forced:
            return need, outs, 0.0
        best = (self.price(k, specs, known, need, outs), need, outs)
        for slot, kn in enumerate(known):
            if not kn or best[0] == 0.0:
                continue
            free = specs.copy()
            free[slot] = self.placeholder(mesh, self.shapes[self.ins[k][slot]])
            try:
                n2, o2 = self.answer(k, mesh, free)
            except SpmdError:
                continue
            c = self.price(k, specs, known, n2, o2)
            if c < best[0]:
                best = (c, n2, o2)
        if best[0] > 0.0:
            for _, (n2, o2) in self.keeping_results(self.ops[k], mesh):
                c = self.price(k, specs, known, n2, o2)
                if c < best[0]:
                    best = (c, n2, o2)
        return best[1], best[2], best[0]

    def price(self, k: int, specs: Sequence[TensorSpec], known: Sequence[bool],
              need: Sequence[DistAttr], outs: Sequence[DistAttr], skip: int = -1) -> float:
        """Seconds of the reshards an answer forces: from the known operands ``specs`` (but
        tensor ``skip``) to ``need``, and from ``outs`` to the layouts of the results whose
        annotation fixes them whole (a layer's output laid out as the user wrote)."""
        total = 0.0
        shapes, tensors, cost = self.shapes, self.tensors, self.cost
        for i, s, kn, n in zip(self.ins[k], specs, known, need, strict=True):
            if kn and i != skip:
                total += reshard_time(s.attr, n, shapes[i], tensors[i].dtype, cost)
        for i, o in zip(self.outs[k], outs, strict=True):
            fixed = self.fixed(i, o.mesh)
            if fixed is not None:
                total += reshard_time(o, fixed, shapes[i], tensors[i].dtype, cost)
        return total

    def given(self, k: int, i: int, v: DistAttr | None) -> tuple[DistAttr, float] | None:
        """What op ``k`` would need of its operand ``i`` were ``i`` laid out as ``v`` (None:
        not known, what the op needs given its other operands alone), its other operands as
        they are, and the seconds of the reshards that forces on those others; None if its rule
        refuses that or ``v`` is on another mesh."""
        ins = self.ins[k]
        mesh, _, _ = self.best_known(ins)
        if v is not None and v.mesh != mesh:
            return None
        st, spec_at = self.st, self.spec_at
        mine = (self.placeholder(mesh, self.shapes[i]) if v is None
                else cached_spec(self.shapes[i], v))
        specs = [mine if j == i else spec_at(j, mesh) for j in ins]
        known = [v is not None if j == i else st.attr[j] is not None for j in ins]
        try:
            need, outs, total = self.settled(k, mesh, specs, known)
        except SpmdError:
            return None
        if total:  # what it forces on the rest of the op (the tensor's own are its edges)
            total = self.price(k, specs, known, need, outs, skip=i)
        # the tensor's offer from this op is the one for its last slot (see ``Sweeps.forward``)
        return need[len(ins) - 1 - ins[::-1].index(i)], total

    def settle_conflict(self, op: Op, mesh: ProcessMesh, error: SpmdError) -> Answer:
        """The rule refused the operands together: keep one known operand (highest rank) and
        give the others placeholders, or keep a result the annotations fix whole; the cheapest
        total reshard wins (module docs), an operand on ties, and the losers are recorded."""
        st = self.st
        ins = op.inputs
        known = [(j, t) for j, t in enumerate(ins) if st.attr[t.order] is not None]
        top = max(st.rank[t.order] for _, t in known)
        full = self.spec_fn(mesh)
        best: tuple[float, int, int, tuple[DistAttr, ...], tuple[DistAttr, ...]] | None = None
        for pos, (slot, keep) in enumerate(known):
            if st.rank[keep.order] != top:
                continue
            # by operand slot, not by tensor: one tensor in two slots keeps one of them
            calls = itertools.count()

            def spec(t: Tensor, slot: int = slot, calls: Iterator[int] = calls) -> TensorSpec:
                return full(t) if next(calls) == slot else self.placeholder(mesh, t.shape)

            self.rule_calls += 1
            try:
                need, outs = op.flat_info(op.rule.infer_forward(*op.forward_args(spec)))
            except SpmdError:
                continue
            total = self.conflict_price(op, need, outs)
            if best is None or (total, pos) < (best[0], best[1]):
                best = (total, pos, slot, need, outs)
        for r, answer in self.keeping_results(op, mesh):
            total = self.conflict_price(op, *answer)
            if best is None or total < best[0]:
                best = (total, len(known) + r, -2 - r, *answer)
        if best is None:
            given = ", ".join(f"{t.name}={full(t).attr.mapping_str()}" for _, t in known)
            raise UnresolvableConflictError(
                f"op {op.name!r} ({op.type}): its rule refuses the operands' attributes "
                f"({given}) and every one of them alone: {error}. Change the annotations that "
                "reach this op"
            ) from error
        need = best[3]
        for t, n in zip(ins, need, strict=True):
            a = st.attr[t.order]
            if a is not None and a != n:
                if self.is_shared[t.order]:
                    st.touched_shared = True
                st.reject(t.order, Refusal(
                    RawOffer(n, WEAK, op.order - self.base[t.order], DEM, -1), "rule",
                    f"{op.type} cannot take it together with its other operands ({error}); "
                    "the op keeps", best[2],
                ))
        return need, best[4]

    def conflict_price(self, op: Op, need: Sequence[DistAttr], outs: Sequence[DistAttr]
                       ) -> float:
        """Seconds of the reshards a conflict's answer forces: each known operand's to ``need``
        and, from ``outs``, each result's to the layout its annotation fixes whole."""
        st, cost = self.st, self.cost
        total = 0.0
        for t, n in zip(op.inputs, need, strict=True):
            a = st.attr[t.order]
            if a is not None:
                total += reshard_time(a, n, t.shape, t.dtype, cost)
        for t, o in zip(op.outputs, outs, strict=True):
            fixed = self.fixed(t.order, o.mesh)
            if fixed is not None:
                total += reshard_time(o, fixed, t.shape, t.dtype, cost)
        return total

    def fixed(self, i: int, mesh: ProcessMesh) -> DistAttr | None:
        """The layout on ``mesh`` that tensor ``i``'s annotation fixes whole, or None."""
        ann = self.ann[i]
        if ann is None or not ann.is_fully_closed or ann.attr.mesh != mesh:
            return None
        return ann.attr

    def given_slot(self, mesh: ProcessMesh, t: Tensor, need: Sequence[DistAttr], slot: int
                   ) -> TensorSpec:
        """Operand slot ``slot`` laid out as ``need`` says (a generic rule's results, after
        the operands, as placeholders)."""
        if slot < len(need):
            return cached_spec(t.shape, need[slot])
        return self.placeholder(mesh, t.shape)

    def keeping_results(self, op: Op, mesh: ProcessMesh) -> Iterator[tuple[int, Answer]]:
        """Per result the annotations fix whole (no offer overturns it): the answer of the op's
        forward rule on what its reverse rule needs of the operands to make that result (the
        other results as placeholders); none where a rule refuses, or has no reverse."""
        if not op.rule.has_reverse:
            return
        for r, t in enumerate(op.outputs):
            fixed = self.fixed(t.order, mesh)
            if fixed is None:
                continue

            def spec(u: Tensor, t: Tensor = t, fixed: DistAttr = fixed) -> TensorSpec:
                return (cached_spec(u.shape, fixed) if u is t
                        else self.placeholder(mesh, u.shape))

            self.rule_calls += 2
            try:
                need = op.flat_info(op.rule.infer_reverse(*op.reverse_args(spec)))[0]
                # by operand slot, not by tensor: one tensor in two slots may be needed twice
                slots = itertools.count()

                def needed(u: Tensor, need: tuple[DistAttr, ...] = need,
                           slots: Iterator[int] = slots) -> TensorSpec:
                    return self.given_slot(mesh, u, need, next(slots))

                answer = op.flat_info(op.rule.infer_forward(*op.forward_args(needed)))
            except SpmdError:
                continue
            yield r, answer
