"""Grouped letters (grouped-query heads): one letter, different sizes in different tensors.

A block of q's heads pairs with the k head its group shares only when the letter's mesh dims
divide every size the letter has; otherwise the letter is whole (``Description.grouped``).
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.core.spec import TensorSpec
from spmdrules.engine.einsum import LetterMap


def grouped_sizes(grouped: frozenset[str], tensors: Sequence[tuple[int, str, TensorSpec, str]],
                   broadcast: frozenset[tuple[int, int]]) -> dict[str, set[int]]:
    """Every size each grouped letter has over the tensors, but a ``broadcast`` dim's (a mask's
    size-1 heads, never split: it pairs with every block of heads)."""
    sizes: dict[str, set[int]] = {ch: set() for ch in grouped}
    for i, ls, t, _ in tensors:
        for p, (ch, n) in enumerate(zip(ls, t.shape, strict=True)):
            if ch in sizes and (i, p) not in broadcast:
                sizes[ch].add(n)
    return sizes


def guard_uneven(guard: tuple[int, int] | None,
                  tensors: Sequence[tuple[int, str, TensorSpec, str]]) -> bool:
    """Is the guard tensor's dim split by a count its size does not divide?"""
    if guard is None:
        return False
    arg, dim = guard
    for i, _, t, _ in tensors:
        if i == arg:
            count = 1
            for d in t.attr.multi_dims_mapping[dim]:
                count *= t.attr.mesh.shape[d]
            return t.shape[dim] % count != 0
    return False


def ungrouped(lm: LetterMap, sizes_of: dict[str, set[int]], mesh_shape: tuple[int, ...]
               ) -> LetterMap:
    """The letters without a grouped letter whose merged mesh dims do not divide every size it
    has (a block of q's heads must meet the k head its group shares): it is whole."""
    out = dict(lm)
    for ch, sizes in sizes_of.items():
        dims = out.get(ch, ())
        count = 1
        for d in dims:
            count *= mesh_shape[d]
        if dims and any(n % count for n in sizes):
            out[ch] = ()
    return out


__all__ = ["grouped_sizes", "guard_uneven", "ungrouped"]
