"""Offers inside the pass: the record, how a tensor holds them, their order, and how an
annotation sees one."""

from __future__ import annotations

from typing import Final, NamedTuple

from spmdrules.completion.rank import annotation
from spmdrules.completion.result import OfferKind
from spmdrules.core.attr import DistAttr
from spmdrules.graph.annotation import Annotation

#: offer kinds (``RawOffer.kind``): a producer's forward offer, a consumer's reverse offer, a
#: consumer's demand (what it needs of its operand given its other operands)
FWD, REV, DEM = 0, 1, 2
KINDS: Final[tuple[OfferKind, ...]] = ("forward", "reverse", "demand")


class RawOffer(NamedTuple):
    """One offer inside the pass (made thousands of times per model, so a tuple).

    Nothing in it is absolute, so an offer is the same record in every layer of a stack (see
    ``completion_blocks``): ``op`` is counted from the tensor's ``Index.base`` op, and ``driver``
    is a position among the op's operands (forward and demand offers) or results (reverse
    offers), not a tensor. ``Completion`` turns it into an ``Offer`` when asked."""

    attr: DistAttr
    rank: int
    #: the op that made it, counted from the tensor's base op
    op: int
    #: FWD, REV or DEM
    kind: int
    #: the position of the tensor that drove it among the op's operands or results (-1: none)
    driver: int


class Refusal(NamedTuple):
    """One refused offer (``State.rejected``)."""

    offer: RawOffer
    reason: str
    detail: str
    #: the position among the op's operands of the one a conflict kept (its name ends the
    #: detail), ``-2 - r`` for its result ``r`` kept as annotated, or -1: so that a refusal
    #: names no tensor and reads the same in every layer
    kept: int


def put_offer(offers: list[RawOffer | list[RawOffer] | None], i: int, o: RawOffer) -> int:
    """Give tensor ``i`` offer ``o``, one per op and direction: a new offer replaces the same
    op's earlier one in its place, else comes last. How many offers the tensor holds now.

    A tensor holds None, the one offer itself (most tensors get one: no list for them), or a
    list, which is never changed once made (a new offer makes a new list): repeated blocks
    record and replay tensors' offers by reference."""
    held = offers[i]
    if held is None:
        offers[i] = o
        return 1
    if isinstance(held, list):
        k, kind = o.op, o.kind
        for pos, p in enumerate(held):
            if p.op == k and p.kind == kind:
                new = held.copy()
                new[pos] = o
                offers[i] = new
                return len(new)
        offers[i] = [*held, o]
        return len(held) + 1
    if held.op == o.op and held.kind == o.kind:
        offers[i] = o
        return 1
    offers[i] = [held, o]
    return 2


def holds(held: RawOffer | list[RawOffer] | None, op: int, kind: int) -> bool:
    """Whether a tensor holding ``held`` holds an offer of ``kind`` from ``op`` (counted from its
    base)."""
    if held is None:
        return False
    if isinstance(held, list):
        return any(p.op == op and p.kind == kind for p in held)
    return held.op == op and held.kind == kind


def offer_key(o: RawOffer) -> tuple[int, int]:
    """The tie-break: the producer's forward offer first, then consumers in topological order."""
    return (0 if o.kind == FWD else 1, o.op)


def origin_key(o: RawOffer) -> tuple[bool, tuple[int, int]]:
    """The tie-break among offers of a tensor's attribute and rank for its origin: a one-operand
    op's demand (no driver; see ``Sweeps.forward``) only echoes the rank of the tensor it asks
    of, so the offer that gave the tensor that rank is its origin, when there is one."""
    return (o.kind == DEM and o.driver < 0, offer_key(o))


def project(ann: Annotation, offered: DistAttr, rank: int) -> DistAttr | None:
    """An offer seen through an annotation: closed dims as annotated, hinted open dims keep their
    hint unless the offer outranks the annotation, other open dims as offered. None if the
    offer's mesh is not the annotation's."""
    if offered.mesh != ann.mesh:
        return None
    # the annotation's partial mesh dims are taken: an open dim split over one of them would
    # make the tensor split and pending on one mesh dim at once (no layout)
    used: set[int] = {m for m, _ in ann.partial}
    dims: list[tuple[int, ...] | None] = []
    outrank = rank > annotation(ann.priority)
    for spec, closed in zip(ann.dims, ann.closed, strict=True):
        # a closed dim always has a mapping (``Annotation`` refuses one without)
        if spec is not None and (closed or not outrank):
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
