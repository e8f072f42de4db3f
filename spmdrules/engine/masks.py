"""Masked pending sums: the layout of a lookup from a table that one mesh dim splits by rows.

A pending sum on mesh dim ``m`` is *masked by* tensor dim ``d`` when, for every index ``i`` of
``d``, one process along ``m`` holds the whole slice ``[.., i, ..]`` and every other holds zeros
there. A lookup (``index_select`` of a row-split table) makes one: each process reads the rows it
holds and zeros for the others, as DTensor's ``MaskPartial`` and Paddle's ``c_embedding``. A
masked sum is a plain pending sum too (summing it gives the value), and more: each element is
nonzero on one process only, so an op ``f`` with ``f(0) = 0`` applied locally (silu, relu, a
product with a replicated factor) gives the masked sum of ``f`` of the value, where a plain sum
must be reduced first. A mixture of experts is exactly that: each token's expert weights are
looked up, multiplied, activated, multiplied again and weighted, then summed over the chosen
experts, and with the experts split on ``m`` the only collective is that final sum's reduction.

Two masked sums multiply into a masked sum only when one process holds both factors of every
element: the same rows of the same lookup. A rule cannot see where its operands come from, so it
pairs two masks on the same letter, and completion checks the pairing on the graph (both masks
must trace back to lookups by the same index tensor of tables split alike) and re-completes the
ops whose pairing it cannot prove without masks (``spmdrules.completion.masks``).

Only a rule registered with ``masks=True`` sees masks (the registry drops them from every other
rule's operands); its answer is its plain answer (the operands as plain sums) with the masks it
may keep added back by :func:`carry`, from the op's letters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spmdrules.core.attr import DistAttr, MaskItems, PartialItems
from spmdrules.core.spec import SpmdInfo, TensorSpec

#: one operand as the op's letters see it: its spec and its letters (one per dim)
Lettered = tuple[TensorSpec, str]


def plain(t: TensorSpec) -> TensorSpec:
    """``t`` with its masks dropped: the plain pending sum it also is."""
    return TensorSpec._make(t.shape, t.attr.without_masks()) if t.attr.mask_items else t


def any_masked(*tensors: TensorSpec | None) -> bool:
    return any(t is not None and t.attr.mask_items for t in tensors)


def _mask_letters(operands: Sequence[Lettered | None]) -> dict[int, set[str]]:
    """{masked mesh dim: the letters of the dims that mask it, over the operands}."""
    letter_of: dict[int, set[str]] = {}
    for o in operands:
        if o is not None:
            t, ls = o
            for m, d in t.attr.mask_items:
                letter_of.setdefault(m, set()).add(ls[d])
    return letter_of


def _whole_unless_masked(o: Lettered | None, m: int) -> bool:
    """The operand is masked on mesh dim ``m``, or whole on it (neither partial nor split)."""
    if o is None:
        return True
    a = o[0].attr
    return (any(mm == m for mm, _ in a.mask_items)
            or (not a.is_partial(m) and m not in a.sharded_mesh_dims))


def _kept(operands: Sequence[Lettered | None], outputs: Sequence[str], info: SpmdInfo,
          product: bool) -> dict[int, str]:
    """{mesh dim: the letter that masks it} for every masked mesh dim the answer may keep."""
    used: set[int] = set()
    for a in (*info.inputs, *info.outputs):
        if isinstance(a, DistAttr):
            used |= a.sharded_mesh_dims
    one_operand = sum(o is not None for o in operands) == 1
    kept: dict[int, str] = {}
    for m, letters in _mask_letters(operands).items():
        if len(letters) != 1 or m in used:
            continue
        (ch,) = letters
        if ch == "1" or any(ch not in ls for ls in outputs):
            continue  # a broadcast or a reduced letter: each slice may sum several owners
        if (product or one_operand) and all(_whole_unless_masked(o, m) for o in operands):
            kept[m] = ch
    return kept


def _with(a: DistAttr, extra: dict[int, int]) -> DistAttr:
    part: PartialItems = tuple(sorted({**dict(a.partial_items), **dict.fromkeys(extra, "sum")}
                                      .items()))
    masks: MaskItems = tuple(sorted({**dict(a.mask_items), **extra}.items()))
    return DistAttr._make(a.mesh, a.multi_dims_mapping, part, masks)


def carry(info: SpmdInfo, operands: Sequence[Lettered | None], outputs: Sequence[str], *,
          product: bool = False) -> SpmdInfo:
    """``info`` (the op's answer for its operands as plain sums) with the masks it keeps.

    ``operands``: each of ``info.inputs`` with its letters (None for one the op does not
    multiply, e.g. an index); ``outputs``: each result's letters, an operand's letter naming the same
    index. A masked mesh dim stays masked when every masked operand is masked by one letter,
    every result keeps that letter, no answer splits a dim on the mesh dim, and the other
    operands are whole on it (``product``: the op multiplies its operands, so a zero times
    anything is zero; otherwise the op must take one operand). The masked operands are then
    taken as they are on that mesh dim, and each result is a sum masked by its dim of the letter.
    """
    kept = _kept(operands, outputs, info, product)
    if not kept:
        return info
    ins: list[Any] = []
    for o, a in zip(operands, info.inputs, strict=True):
        extra = ({m: d for m, d in o[0].attr.mask_items if m in kept}
                 if o is not None and isinstance(a, DistAttr) else None)
        ins.append(_with(a, extra) if extra and isinstance(a, DistAttr) else a)
    outs: list[DistAttr | None] = []
    for ls, a in zip(outputs, info.outputs, strict=True):
        assert isinstance(a, DistAttr)
        outs.append(_with(a, {m: ls.index(ch) for m, ch in kept.items()}))
    return SpmdInfo(ins, outs)


__all__ = ["Lettered", "any_masked", "carry", "plain"]
