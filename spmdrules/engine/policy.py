"""The policy of a described op: what its results keep of its inputs' pending sums and masks.

A :class:`~spmdrules.engine.description.Description` gives every dim a letter; where Paddle's
answer depends on more than the letters (which pending reductions pass through the op, whether a
masked sum stays masked, which inputs the op does not read), the op states it here, in named and
typed fields, and the engine derives both directions from them. Every family's quirks go through
this one public object: a rule module carries no merge of its own, and conformance predicates
read the policy instead of a rule's private helpers.

The letter merge's own choices (``on_axis_conflict``, ``priority``, ``claim_broadcast``) are
fields of the Description beside it. A new kind of policy is a new named field here, with its
default the behaviour every other op keeps::

    Description.of("ab->ba", linear=(0,), policy=Policy(linear_types=EVERY_REDUCTION))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from spmdrules.core.attr import PartialItems
from spmdrules.core.spec import TensorSpec
from spmdrules.engine.windows import Windowed

#: How masked pending sums (``spmdrules.engine.masks``) cross the op: ``"none"``, they are plain
#: sums (the registry strips them unless the rule declares ``masks``); ``"single"``, an op of one
#: operand with f(0) = 0 keeps them; ``"product"``, the op multiplies its operands, so a zero
#: times anything stays zero.
MaskCarry = Literal["none", "single", "product"]
#: What one mesh dim on two letters does: the first keeps it, or the op refuses
SharedMeshDim = Literal["first", "error"]

#: Paddle's reduce types: a pending result of any of them passes a permutation of its dims.
EVERY_REDUCTION: Final = frozenset({"sum", "avg", "max", "min", "product", "any", "all"})
#: The reduce types a product is linear in: a pending sum or mean times a factor.
LINEAR_REDUCTIONS: Final = frozenset({"sum", "avg"})


@dataclass(frozen=True, slots=True)
class Policy:
    """Named choices beside the letters; the defaults are what a plain described op does."""

    #: the reduce types of the pending results that pass through an input in ``linear``
    linear_types: frozenset[str] = frozenset({"sum"})
    #: the ``linear`` inputs are factors of a product (multiply): linear in each alone, not in
    #: both. The first factor with pending results passes all of them, when each is of a
    #: ``linear_types`` type on a mesh dim that no answer shards; otherwise none passes and each
    #: input is resolved first
    factors: bool = False
    #: how masked pending sums cross the op (:data:`MaskCarry`)
    masks: MaskCarry = "none"
    #: inputs whose values the op does not read (full_like reads x's shape only): they keep
    #: their own attribute, pending results included, in both directions
    unread: tuple[int, ...] = ()
    #: in reverse, a ``'1'`` dim's shard claims its mesh dim, as ``claim_broadcast`` does in both
    #: directions (Paddle's norms merge the outputs' normalised dims as one shared letter; their
    #: forward ignores x's normalised dims)
    reverse_claims_broadcast: bool = False
    #: in reverse too, the outputs' pending results of ``linear_types`` stay pending and each
    #: ``linear`` input takes them (a pending sum of x gives a pending sum of x's sum)
    reverse_linear: bool = False
    #: letters replicated unless their mesh dims divide their size (a mean of unequal blocks is
    #: not the mean of the whole); ``Description.divisible`` asks it of every letter
    even: frozenset[str] = frozenset()
    #: the ``linear`` inputs are summands (add_n): their pending results pass only when every
    #: summand has the same ones, each of a ``linear_types`` type; otherwise none passes
    summands: bool = False
    #: forward, the pieces of the merged list argument are aligned by Paddle's cost
    #: (``spmdrules.engine.align``: a mesh dim they disagree on goes to the cheapest axis) instead
    #: of merged letter by letter; their shared linear pending results pass to every tensor
    align: bool = False
    #: one mesh dim on two letters: ``"first"``, the first letter keeps it (the merge's
    #: ``priority``); ``"error"``, the op refuses (an embedding cannot split ids and rows alike)
    shared_mesh_dim: SharedMeshDim = "first"
    #: (input, letter, why): a letter the op's kernel cannot shard in this call where the given
    #: input shards it (a vocab-parallel lookup with a padding_idx); forward refuses with ``why``
    refused: tuple[tuple[int, str, str], ...] = ()
    #: the spatial letters of a window op (pooling, an interpolation): a split whose output is
    #: shorter than its pieces ends here (the letter whole), one whose windows reach past the
    #: neighbouring block is refused (:class:`spmdrules.engine.windows.Windowed`)
    windows: Windowed | None = None

    @property
    def plain_merge(self) -> bool:
        """The letters' merge is all: no unread input, uneven letter, refusal, alignment,
        summands or windows (the compiled fast path of ``spmdrules.engine.compiled`` answers)."""
        return not (self.unread or self.even or self.refused or self.align or self.summands
                    or self.windows is not None or self.shared_mesh_dim != "first")

    def passed(self, linear: Sequence[int], args: Sequence[Any], used: set[int]
               ) -> dict[int, PartialItems]:
        """{input index: the pending results it keeps and passes to the outputs}."""
        if self.summands:
            return self._summed(linear, args)
        out: dict[int, PartialItems] = {}
        for i in linear:
            a = args[i]
            if not isinstance(a, TensorSpec):
                continue
            items = a.attr.partial_items
            if self.factors:
                if items:
                    if all(d not in used and rt in self.linear_types for d, rt in items):
                        out[i] = items
                    return out
                continue
            out[i] = tuple(p for p in items if p[1] in self.linear_types and p[0] not in used)
        return out

    def _summed(self, linear: Sequence[int], args: Sequence[Any]) -> dict[int, PartialItems]:
        """A sum of pieces pending the same way is pending that way, for linear types only."""
        pieces = [t for i in linear for t in (args[i] if isinstance(args[i], tuple)
                                              else (args[i],)) if isinstance(t, TensorSpec)]
        items = pieces[0].attr.partial_items if pieces else ()
        if not items or any(t.attr.partial_items != items for t in pieces) or any(
                rt not in self.linear_types for _, rt in items):
            return {}
        return dict.fromkeys(linear, items)


PLAIN: Final = Policy()

__all__ = ["EVERY_REDUCTION", "LINEAR_REDUCTIONS", "PLAIN", "MaskCarry", "Policy", "SharedMeshDim"]
