"""A Description compiled for the common call: the fast path of both directions.

``infer_forward`` and ``infer_reverse`` in :mod:`spmdrules.engine.description` are the
definition. A ``CompiledRule`` precomputes, once per description, what they recompute per call (which
dims of each tensor take part in the merge, the letters the outputs keep) and answers the common
call (every argument one tensor or absent, no two tensors sharding one letter differently, no
``linear`` or ``divisible`` policy) in one pass over the mappings. Any other call answers
``None`` and takes the general path, so both give the same answer by construction: the fast path
only skips work whose result it has checked to be trivial.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Protocol

from spmdrules.core.attr import DistAttr, MultiDims, PartialItems
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine import einsum
from spmdrules.engine.policy import Policy


class Description(Protocol):
    """What a plan reads of :class:`spmdrules.engine.description.Description`."""

    @property
    def inputs(self) -> tuple[Any, ...]: ...
    @property
    def outputs(self) -> tuple[Any, ...]: ...
    @property
    def whole(self) -> frozenset[str]: ...
    @property
    def pending(self) -> str | None: ...
    @property
    def mask(self) -> str | None: ...
    @property
    def priority(self) -> str | None: ...
    @property
    def merge(self) -> tuple[int, ...] | None: ...
    @property
    def linear(self) -> tuple[int, ...]: ...
    @property
    def divisible(self) -> bool: ...
    @property
    def claim_broadcast(self) -> bool: ...
    @property
    def claimed(self) -> frozenset[str]: ...
    @property
    def grouped(self) -> frozenset[str]: ...
    @property
    def reverse_merge(self) -> tuple[int, ...] | None: ...
    @property
    def replicated_dims(self) -> frozenset[tuple[int, int]]: ...
    @property
    def policy(self) -> Policy: ...
    @property
    def contraction(self) -> object | None: ...
    @property
    def reading(self) -> object | None: ...

#: per merged tensor: (argument index, its letters, the dims that take part in the merge)
Merged = tuple[tuple[int, str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class CompiledRule:
    """What one Description's inference needs, computed once."""

    inputs: tuple[str | None, ...]
    outputs: tuple[str | None, ...]
    forward_merge: Merged | None
    reverse_merge: Merged | None
    kept: frozenset[str]
    pending: str | None
    priority: str | None
    #: a one-tensor op whose outputs carry its letters (a scan, a mask, a slice that keeps every
    #: dim): the positions whose shard it drops; the other shards pass through unchanged
    unary: frozenset[int] | None = None
    #: the op passes some inputs' pending results (``linear``): a call with one takes the
    #: general path
    linear: bool = False
    #: the outputs' pending results stay pending in reverse: a call with one takes the general
    #: path
    reverse_linear: bool = False

    def forward(self, args: Sequence[Any]) -> SpmdInfo | None:
        """The forward answer, or None when the general path must give it."""
        if self.linear and any(type(a) is TensorSpec and a.attr.partial_items for a in args):
            return None
        if self.unary is not None and (unary := self._unary_forward(args)) is not None:
            return unary
        merged = self.forward_merge
        if merged is None or not _ranks_match(self.inputs, args):
            return None
        lm = _merge(merged, args, self.priority)
        if lm is None:
            return None
        partial = self._contract(lm)
        ins: list[DistAttr | None] = []
        mesh = None
        made: dict[str, DistAttr] = {}  # letters -> attribute: an output like an input shares it
        for a, ls in zip(args, self.inputs, strict=True):
            if a is None:
                ins.append(None)
                continue
            at = a.attr
            mesh = at.mesh
            m = _mapping(ls, lm)  # type: ignore[arg-type]  # a present tensor has letters
            if at.multi_dims_mapping != m or at.partial_items:
                at = DistAttr._make(mesh, m, ())
            ins.append(at)
            made[ls] = at  # type: ignore[index]
        if mesh is None:  # no tensor at all: the general path names the error
            return None
        return SpmdInfo(ins, [None if ls is None else made[ls] if not partial and ls in made
                              else DistAttr._make(mesh, _mapping(ls, lm), partial)
                              for ls in self.outputs])

    def _unary_forward(self, args: Sequence[Any]) -> SpmdInfo | None:
        """A unary op's forward: its input less the dropped shards, on every output too."""
        assert self.unary is not None
        if len(args) != 1 or type(a := args[0]) is not TensorSpec or (
                len(a.attr.multi_dims_mapping) != len(self.inputs[0])):  # type: ignore[arg-type]
            return None
        at = _dropped(a.attr, self.unary)
        return SpmdInfo((at,), (at,) * len(self.outputs))

    def _contract(self, lm: dict[str, tuple[int, ...]]) -> PartialItems:
        """The letters no output keeps: pending results on their mesh dims, or (no ``pending``)
        dropped from ``lm``."""
        kept = self.kept
        contracted = [ch for ch in lm if ch not in kept and ch != "1"]
        if not contracted:
            return ()
        if self.pending is None:
            for ch in contracted:
                del lm[ch]
            return ()
        return tuple(sorted({d: self.pending for ch in contracted for d in lm[ch]}.items()))

    def reverse(self, args: Sequence[Any], outs: Sequence[Any]) -> SpmdInfo | None:
        """The reverse answer, or None when the general path must give it."""
        if self.reverse_linear and any(type(o) is TensorSpec and o.attr.partial_items for o in outs):
            return None
        if (self.unary is not None and len(outs) == 1 == len(args)
                and type(o := outs[0]) is TensorSpec and type(a := args[0]) is TensorSpec):
            unary = self._unary_reverse(a.attr, o.attr)
            if unary is not None:
                return unary
        if (self.reverse_merge is None or not _ranks_match(self.inputs, args)
                or not _ranks_match(self.outputs, outs)):
            return None
        lm = _merge(self.reverse_merge, outs, self.priority)
        if lm is None:
            return None
        return SpmdInfo(
            [None if a is None else _attr(a.attr, ls, lm)  # type: ignore[arg-type]
             for a, ls in zip(args, self.inputs, strict=True)],
            [None if a is None else _attr(a.attr, ls, lm)  # type: ignore[arg-type]
             for a, ls in zip(outs, self.outputs, strict=True)],
        )

    def _unary_reverse(self, at: DistAttr, o: DistAttr) -> SpmdInfo | None:
        """A unary op's reverse: the output's shards less the dropped ones, on both."""
        assert self.unary is not None
        n = len(self.inputs[0])  # type: ignore[arg-type]
        if not len(o.multi_dims_mapping) == n == len(at.multi_dims_mapping):
            return None
        out = _dropped(o, self.unary)
        if at.multi_dims_mapping != out.multi_dims_mapping or at.partial_items:
            at = out if at.mesh is out.mesh else DistAttr._make(at.mesh, out.multi_dims_mapping, ())
        return SpmdInfo((at,), (out,))


def _is_fast(desc: Description) -> bool:
    """The description uses none of the policies the fast path leaves to the general one."""
    single = all(ls is None or isinstance(ls, str) for ls in (*desc.inputs, *desc.outputs))
    policy = desc.policy
    return (single and not desc.divisible and not desc.grouped and policy.plain_merge
            and desc.reverse_merge is None and not desc.replicated_dims
            and not desc.claimed and desc.mask is None and desc.contraction is None
            and desc.reading is None)


def _merged(letters: Sequence[str | None], order: Sequence[int], whole: frozenset[str],
            claim: bool) -> Merged:
    """Per merged tensor in ``order``, the dims that take part (not whole; a broadcast one only
    if the op claims broadcasts)."""
    return tuple((i, ls, tuple(p for p, ch in enumerate(ls)
                               if ch not in whole and (ch != "1" or claim)))
                 for i in order if isinstance(ls := letters[i], str))


def _unary(desc: Description, ins: tuple[str | None, ...], outs: tuple[str | None, ...],
           order: Sequence[int]) -> frozenset[int] | None:
    """For a one-tensor op whose outputs all carry its letters (each once), the positions
    whose shard it drops; else None."""
    if len(ins) != 1 or not isinstance(ls := ins[0], str) or 0 not in order or not outs:
        return None
    if any(o != ls for o in outs) or len(set(ls)) != len(ls.replace("1", "")) + ("1" in ls):
        return None
    return frozenset(p for p, ch in enumerate(ls) if ch in desc.whole or ch == "1")


def compile_rule(desc: Description) -> CompiledRule:
    fast = _is_fast(desc)
    kept = frozenset("".join(ls for ls in desc.outputs if isinstance(ls, str)))
    ins: tuple[str | None, ...] = tuple(ls if isinstance(ls, str) else None for ls in desc.inputs)
    outs: tuple[str | None, ...] = tuple(ls if isinstance(ls, str) else None
                                         for ls in desc.outputs)
    order = range(len(ins)) if desc.merge is None else desc.merge
    if not fast:
        return CompiledRule(ins, outs, None, None, kept, desc.pending, desc.priority, None,
                    bool(desc.linear), desc.policy.reverse_linear)
    claim = desc.claim_broadcast
    return CompiledRule(ins, outs, _merged(ins, order, desc.whole, claim),
                _merged(outs, range(len(outs)), desc.whole,
                        claim or desc.policy.reverse_claims_broadcast),
                kept, desc.pending, desc.priority, _unary(desc, ins, outs, order),
                bool(desc.linear), desc.policy.reverse_linear)


def _dropped(a: DistAttr, positions: frozenset[int]) -> DistAttr:
    """``a`` without the shards of those dims, and without pending sums."""
    m = a.multi_dims_mapping
    for p in positions:
        if m[p]:
            return DistAttr._make(a.mesh, tuple([() if q in positions else d
                                                 for q, d in enumerate(m)]), ())
    return DistAttr._make(a.mesh, m, ()) if a.partial_items else a


def _ranks_match(letters: Sequence[str | None], args: Sequence[Any]) -> bool:
    if len(letters) != len(args):
        return False
    for ls, a in zip(letters, args, strict=True):
        if a is None:
            continue
        if type(a) is not TensorSpec or ls is None or len(a.attr.multi_dims_mapping) != len(ls):
            return False
    return True


def _merge(merged: Merged, args: Sequence[Any], priority: str | None
           ) -> dict[str, tuple[int, ...]] | None:
    """The letters' mesh dims, or None on a letter sharded two ways (the op's conflict policy)."""
    lm: dict[str, tuple[int, ...]] = {}
    for i, ls, active in merged:
        a = args[i]
        if a is None:
            continue
        m = a.attr.multi_dims_mapping
        for p in active:
            dims = m[p]
            if dims:
                ch = ls[p]
                prev = lm.get(ch)
                if prev is None:
                    lm[ch] = dims
                elif prev != dims:
                    return None
    if len(lm) > 1:
        seen: set[int] = set()
        for dims in lm.values():
            for d in dims:
                if d in seen:
                    return dict(einsum.resolve_mesh_conflicts(lm, priority))
                seen.add(d)
    return lm


def _mapping(ls: str, lm: dict[str, tuple[int, ...]]) -> MultiDims:
    if "1" in ls:
        get = lm.get
        return tuple([() if ch == "1" else get(ch, ()) for ch in ls])
    return tuple(map(lm.get, ls, repeat(())))


def _attr(a: DistAttr, ls: str, lm: dict[str, tuple[int, ...]]) -> DistAttr:
    m = _mapping(ls, lm)
    if a.multi_dims_mapping == m and not a.partial_items:
        return a
    return DistAttr._make(a.mesh, m, ())


__all__ = ["CompiledRule", "compile_rule"]
