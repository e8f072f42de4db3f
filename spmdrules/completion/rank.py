"""Ranks: the order in which offers and annotations claim a tensor (``docs/completion.md``).

A rank is an int ordered as the policy orders claims: higher priority wins, and at one priority
an annotation beats an inference. An annotation of priority p has rank ``annotation(p)``; an
offer an op infers from a tensor of rank r has ``inferred(r)``, the priority of r as an
inference, so a tensor's own annotation outranks whatever is inferred from it or from its peers.
Ranks are compared thousands of times per model, so they stay plain ints: this module is the one
place that knows how the priority and the "annotated" mark share one.
"""

from __future__ import annotations

from typing import Final

#: the rank of an offer no known tensor drove (a placeholder's echo): below every priority
WEAK: Final = -(1 << 40)


def annotation(priority: int) -> int:
    """The rank of an annotation of ``priority``."""
    return 2 * priority + 1


def inferred(rank: int) -> int:
    """The rank of an offer inferred from a tensor of ``rank``: its priority, not annotated."""
    return (rank >> 1) << 1


def priority(rank: int) -> int:
    """The priority a rank carries."""
    return rank >> 1


def is_annotation(rank: int) -> bool:
    """Whether ``rank`` is an annotation's (not an inference's)."""
    return bool(rank & 1)
