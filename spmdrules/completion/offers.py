"""Offers inside the pass: the raw tuple, and how a tensor holds them."""

from __future__ import annotations

from typing import Any

from spmdrules.core.attr import DistAttr

# An offer inside the pass is a plain tuple (it is made thousands of times per model):
# (attr, rank, op, kind code, driver or -1). Nothing in it is absolute, so an offer is the same
# tuple in every layer of a stack (see ``completion_blocks``): the op is counted from the
# tensor's ``Index.base`` op, and the driver is a position among the op's operands (forward and
# demand offers) or results (reverse offers), not a tensor. ``Completion`` turns it into an
# ``Offer`` when asked.
RawOffer = tuple[DistAttr, int, int, int, int]


def put_offer(offers: list[Any], i: int, o: RawOffer) -> int:
    """Give tensor ``i`` offer ``o``, one per op and direction: a new offer replaces the same
    op's earlier one in its place, else comes last. How many offers the tensor holds now.

    A tensor holds None, the one offer itself (most tensors get one: no list for them), or a
    list, which is never changed once made (a new offer makes a new list): repeated blocks
    record and replay tensors' offers by reference."""
    held = offers[i]
    if held is None:
        offers[i] = o
        return 1
    if type(held) is list:
        k, kind = o[2], o[3]
        for pos, p in enumerate(held):
            if p[2] == k and p[3] == kind:
                new = held.copy()
                new[pos] = o
                offers[i] = new
                return len(new)
        offers[i] = [*held, o]
        return len(held) + 1
    if held[2] == o[2] and held[3] == o[3]:
        offers[i] = o
        return 1
    offers[i] = [held, o]
    return 2
