"""A product of two operands (matmul, bmm): its letter merge as named policy fields.

A :class:`~spmdrules.engine.description.Description` whose ``contraction`` is set describes a
product of two operands: the rows' and columns' letters (``m``, ``n`` of ``bmk,bkn->bmn``) are
free, the other letters the product keeps (``b``) are batch letters, and the letters it does not
keep (``k``) are contracted. Its merge is Paddle's ``ShardingMergeForTensorsMatmul``, reconstructed
from the recorded cases (docs/deviations/matmul.md), whose choices are the fields below:

* ``free``: the letters of rows and columns (``m``, ``n``), which one operand and the product
  keep; the other letters the product keeps are batch letters;
* ``coshard``: a letter the operands shard differently is split over both claims (larger mesh
  dims first); if that does not divide its size, the claim that splits it more is kept if it
  divides, else none;
* claim order (fixed): a mesh dim wanted by several letters goes to a batch letter one operand
  shards (the higher-rank operand's first), then to a co-sharded batch letter, then to the free
  letters, larger first (the first operand's on a tie), and to the contracted letters last:
  sharding them costs an all-reduce;
* ``keep_uneven``: a batch or contracted letter keeps mesh dims that do not divide its size
  (ours: blocks of any size multiply exactly, and uneven partial sums add up); ``False`` is
  Paddle's even policy, kept to recognise its answers. Free letters are never checked, and a
  size-1 letter split into several parts is never kept;
* size-1 dims of the operands are replicated, and so are those of the product (our deviation
  ``matmul-size-one-output-shard``: every operand holds such a letter whole);
* ``reverse_swapped``: per operand, Paddle's reverse rule tests for size-1 dims on the operand's
  shape with its last two dims swapped (its ``trans_x`` / ``trans_y`` quirk: the transposed
  letters are read against the stored shape);
* reverse inference reads the operands off the product's letters (each kept where its mesh dims
  divide it, or ``keep_uneven``), and the product is what those operands give (a forward of them,
  without a partial: deviation ``matmul-reverse-out``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, overload

from spmdrules.core.attr import DistAttr, MultiDims, PartialItems
from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine import einsum
from spmdrules.engine.masks import any_masked, carry, plain
from spmdrules.engine.rulekit import attr, shard_product

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

LetterDims = dict[str, tuple[int, ...]]
_NAMES = ("x", "y", "out")
_E = TypeVar("_E")
#: (x mapping, y mapping, product mapping, product partial)
Contracted = tuple[MultiDims, MultiDims, MultiDims, PartialItems]


@dataclass(frozen=True, slots=True)
class Contraction:
    """The merge policy of a product of two operands (see the module doc)."""

    #: the letters of the operands' rows and columns (the product keeps them, one operand has
    #: each): never checked for divisibility, and claimed after the batch letters
    free: frozenset[str] = frozenset("mn")
    coshard: bool = True
    keep_uneven: bool = True
    reverse_swapped: tuple[bool, bool] = (False, False)
    #: the reverse rule refuses an operand whose dim the product drops (a vector): Paddle does
    #: not infer back through it
    reverse_needs_matrices: bool = True

    def paddle_even(self) -> Contraction:
        """This policy with Paddle's treatment of uneven letters (they are replicated)."""
        return dataclasses.replace(self, keep_uneven=False)


@dataclass(frozen=True, slots=True)
class OperandReading:
    """How Paddle's einsum rule reads the operands' mappings before the plain letter merge."""

    #: a co-sharded dim is read as its major mesh dim only (the rule reads the flat
    #: ``dims_mapping``)
    major_only: bool = True
    #: an outer product (two operands without a common letter, the output keeping every letter)
    #: whose factors are both sharded reads the second as replicated
    outer_yields: bool = True

    def read(self, operands: Sequence[tuple[str, MultiDims]], out: str
             ) -> list[tuple[str, MultiDims]]:
        """The operands' letters and mappings as Paddle's rule merges them."""
        ops = [(ls, tuple(d[:1] for d in m)) if self.major_only else (ls, m)
               for ls, m in operands]
        if self.outer_yields and len(ops) == 2 and all(any(m) for _, m in ops):
            letters = ops[0][0] + ops[1][0]
            if len(set(letters)) == len(letters) == len(out):
                ops[1] = (ops[1][0], ((),) * len(ops[1][1]))
        return ops


@overload
def swap_last2(t: tuple[_E, ...], flag: bool) -> tuple[_E, ...]: ...
@overload
def swap_last2(t: npt.NDArray[Any], flag: bool) -> npt.NDArray[Any]: ...
def swap_last2(t: Any, flag: bool) -> Any:
    """``t`` (a shape, a mapping, the letters as a tuple, or an array) with its last two dims
    swapped when ``flag``: an operand stored transposed (Paddle's ``trans_x``, ``trans_y``,
    ``transpose_weight``). A vector has nothing to swap."""
    if isinstance(t, tuple):
        return (*t[:-2], t[-1], t[-2]) if flag and len(t) >= 2 else t
    arr: np.ndarray[Any, Any] = t
    return arr.swapaxes(-1, -2) if flag and arr.ndim >= 2 else arr


def swapped_letters(letters: str, flag: bool) -> str:
    """An operand's letters as stored with ``trans`` = ``flag`` (a vector has nothing to swap)."""
    return "".join(swap_last2(tuple(letters), flag))


# ---- the merge -----------------------------------------------------------------------------------
def _claims(letters: str, mdm: MultiDims) -> LetterDims:
    return {ch: dims for ch, dims in zip(letters, mdm) if dims}  # noqa: B905 - equal by notation


def _keeps(size: int, count: int, even: bool) -> bool:
    """May a batch or contracted letter of ``size`` be cut into ``count`` blocks?"""
    return size % count == 0 or (not even and size > 1)


def _uncontested(xl: str, xm: MultiDims, yl: str, ym: MultiDims) -> LetterDims | None:
    """The common case in one pass: the letters' mesh dims when no letter and no mesh dim is
    contested (only divisibility then remains to check), else None."""
    merged = {ch: dims for ch, dims in zip(yl, ym) if dims}  # noqa: B905 - equal by notation
    for ch, dims in zip(xl, xm):  # noqa: B905
        if dims:
            prev = merged.get(ch)
            if prev is not None and prev != dims:
                return None
            merged[ch] = dims
    used = [d for dims in merged.values() for d in dims]
    return merged if len(used) == len(set(used)) else None


def merge(
    c: Contraction, xl: str, xm: MultiDims, yl: str, ym: MultiDims, ol: str,
    sizes: dict[str, int], mesh_shape: tuple[int, ...],
) -> LetterDims:
    """Per letter, the mesh dims it keeps (see the module doc)."""
    even = not c.keep_uneven
    free = c.free
    merged = _uncontested(xl, xm, yl, ym)
    if merged is not None:
        return {ch: dims for ch, dims in merged.items()
                if ch in free or _keeps(sizes[ch], shard_product(mesh_shape, dims), even)}
    xc = _claims(xl, xm)
    yc = _claims(yl, ym)
    contested = [ch for ch, dims in xc.items() if yc.get(ch, dims) != dims]
    owner: dict[int, str] = {}
    out: LetterDims = {}
    for ch in _claim_order(xl, yl, ol, xc, yc, contested, free, sizes):
        if ch in contested and c.coshard:
            dims = _coshard(
                [d for d in xc[ch] if d not in owner], [d for d in yc[ch] if d not in owner],
                sizes[ch], mesh_shape, even,
            )
        else:
            dims = _left(c, ch, xc.get(ch) or yc[ch], owner, sizes[ch], mesh_shape)
        if dims:
            out[ch] = dims
            for d in dims:
                owner[d] = ch
    return out


def _left(c: Contraction, ch: str, claim: tuple[int, ...], owner: dict[int, str], size: int,
          mesh_shape: tuple[int, ...]) -> tuple[int, ...]:
    """One operand's claim of ``ch`` without the mesh dims letters before it took; a batch or
    contracted letter only if they cut it as the policy allows."""
    dims = tuple(d for d in claim if d not in owner)
    if ch in c.free or _keeps(size, shard_product(mesh_shape, dims), not c.keep_uneven):
        return dims
    return ()


def _coshard(
    xd: list[int], yd: list[int], size: int, mesh_shape: tuple[int, ...], even: bool
) -> tuple[int, ...]:
    """x's and y's mesh dims for one letter: all of them (largest mesh dims first) if they divide
    ``size``, else the operand's claim that splits it more, if that divides it."""
    if set(xd) <= set(yd) or set(yd) <= set(xd):
        union = yd if len(yd) > len(xd) else xd  # one operand's co-shard holds the other's
    else:
        union = xd + [d for d in yd if d not in xd]
        union.sort(key=lambda d: -mesh_shape[d])
    if _keeps(size, shard_product(mesh_shape, union), even):
        return tuple(union)
    best = yd if shard_product(mesh_shape, yd) > shard_product(mesh_shape, xd) else xd
    return tuple(best) if _keeps(size, shard_product(mesh_shape, best), even) else ()


def _claim_order(
    xl: str, yl: str, ol: str, xc: LetterDims, yc: LetterDims, contested: list[str],
    free: frozenset[str], sizes: dict[str, int],
) -> list[str]:
    """Batch letters first (the higher-rank operand's, then co-sharded ones), then the free
    letters (larger first), then the contracted ones."""
    first, second = (yc, xc) if len(yl) > len(xl) else (xc, yc)
    batch = frozenset(ch for ch in ol if ch not in free)
    order = [ch for ch in first if ch in batch and ch not in contested]
    order += [ch for ch in second if ch in batch and ch not in contested and ch not in order]
    order += [ch for ch in contested if ch in batch]
    claimed_free = [ch for ch in xc if ch in free] + [ch for ch in yc if ch in free]
    order += sorted(claimed_free, key=lambda ch: -sizes[ch])  # stable: x's first on a tie
    order += [ch for ch in dict.fromkeys((*xc, *yc)) if ch not in ol]
    return order


# ---- the two directions --------------------------------------------------------------------------
def _mapping(letters: str, dims: LetterDims, shape: tuple[int, ...]) -> MultiDims:
    """An operand's mapping; its size-1 dims are replicated (nothing to split)."""
    get = dims.get
    if 1 in shape:
        return tuple([() if n == 1 else get(ch, ()) for ch, n in zip(letters, shape, strict=True)])
    return tuple([get(ch, ()) for ch in letters])


def _product(letters: str, dims: LetterDims, sizes: dict[str, int],
             mesh_shape: tuple[int, ...]) -> MultiDims:
    """The product's mapping. A size-1 dim split into several parts is replicated: every operand
    holds it whole, so every local product does (deviation ``matmul-size-one-output-shard``)."""
    get = dims.get
    if 1 in sizes.values():
        return tuple([
            () if sizes[ch] == 1 and shard_product(mesh_shape, get(ch, ())) > 1 else get(ch, ())
            for ch in letters
        ])
    return tuple([get(ch, ()) for ch in letters])


def contract(
    c: Contraction, xl: str, xs: tuple[int, ...], xm: MultiDims, yl: str, ys: tuple[int, ...],
    ym: MultiDims, ol: str, mesh_shape: tuple[int, ...],
) -> Contracted:
    """Forward inference on raw shapes and mappings: (x, y, product) mappings and the
    product's partial."""
    sizes = einsum.letter_sizes(((xl, xs), (yl, ys)))
    dims = merge(c, xl, xm, yl, ym, ol, sizes, mesh_shape)
    xm, ym = _mapping(xl, dims, xs), _mapping(yl, dims, ys)
    return xm, ym, _product(ol, dims, sizes, mesh_shape), \
        einsum.contracted_partial(((xl, xm), (yl, ym)), ol)


def _letters(inputs: Sequence[Any], outputs: Sequence[Any]) -> tuple[str, str, str]:
    if len(inputs) != 2 or len(outputs) != 1 or not all(
            isinstance(ls, str) for ls in (*inputs, *outputs)):
        raise RuleArgumentError("a contraction describes two tensors in and one out")
    return inputs[0], inputs[1], outputs[0]


def _tensors(args: Sequence[object], n: int, letters: Sequence[str], names: Sequence[str]
             ) -> list[TensorSpec]:
    """The product's ``n`` tensors, the operands of the rank their ``letters`` give."""
    ts = [a for a in args if type(a) is TensorSpec]
    if len(ts) != len(args) or len(ts) != n:
        raise RuleArgumentError(f"a product takes {n} tensors here, got {list(args)!r}")
    for t, ls, name in zip(ts, letters, names, strict=False):
        if len(t.shape) != len(ls):
            raise RuleArgumentError(
                f"{name!r} has rank {len(t.shape)} but the op's notation gives it {len(ls)} dims "
                f"({ls!r}); pass a tensor of rank {len(ls)}")
    return ts


def forward(c: Contraction, inputs: Sequence[Any], outputs: Sequence[Any],
            args: Sequence[object]) -> SpmdInfo:
    """Forward inference of a product; operands that are masked sums (``engine.masks``) give a
    masked product where the mask's letter survives."""
    xl, yl, ol = _letters(inputs, outputs)
    x, y = _tensors(args, 2, (xl, yl), _NAMES)
    masked = any_masked(x, y)
    px, py = (plain(x), plain(y)) if masked else (x, y)
    mesh = px.attr.mesh
    xm, ym, om, part = contract(c, xl, px.shape, px.attr.multi_dims_mapping, yl, py.shape,
                                py.attr.multi_dims_mapping, ol, mesh.shape)
    info = SpmdInfo([attr(px, xm), attr(py, ym)], [DistAttr._make(mesh, om, part)])
    return carry(info, [(x, xl), (y, yl)], [ol], product=True) if masked else info


def reverse(c: Contraction, inputs: Sequence[Any], outputs: Sequence[Any],
            names: Sequence[str], args: Sequence[object]) -> SpmdInfo:
    """Reverse inference: the operands read off the product's letters, and the product those
    operands give."""
    xl, yl, ol = _letters(inputs, outputs)
    xn, yn, on = names if len(names) == 3 else _NAMES
    x, y, out = _tensors(args, 3, (xl, yl), (xn, yn))
    if c.reverse_needs_matrices and len(out.shape) != max(len(xl), len(yl)):
        raise RuleArgumentError(
            f"{on!r} has rank {len(out.shape)} but the reverse rule needs rank "
            f"max(rank {xn}, rank {yn}) = {max(len(xl), len(yl))} (Paddle does not infer back "
            "through a 1-D operand's dropped dim)"
        )
    if len(ol) != len(out.shape):
        raise RuleArgumentError(
            f"{on!r} of rank {len(out.shape)} cannot be the product of a rank-{len(xl)} {xn!r} "
            f"and a rank-{len(yl)} {yn!r} (that has rank {len(ol)}); the reverse rule needs "
            "operands of rank >= 2"
        )
    sizes = einsum.letter_sizes(((xl, x.shape), (yl, y.shape)))
    want = tuple([sizes[ch] for ch in ol])
    if out.shape != want:
        raise RuleArgumentError(
            f"{on!r} has shape {list(out.shape)} but the product of {xn!r} and {yn!r} has shape "
            f"{list(want)}"
        )
    even = not c.keep_uneven
    mesh_shape = out.attr.mesh.shape
    dims: LetterDims = {}
    for ch, n, md in zip(ol, out.shape, out.attr.multi_dims_mapping, strict=True):
        if md and _keeps(n, shard_product(mesh_shape, md), even):
            dims[ch] = md
    sx, sy = c.reverse_swapped
    xm = _mapping(xl, dims, swap_last2(x.shape, sx and len(xl) > 1))
    ym = _mapping(yl, dims, swap_last2(y.shape, sy and len(yl) > 1))
    if 1 in x.shape or 1 in y.shape:
        om = contract(c, xl, x.shape, xm, yl, y.shape, ym, ol, mesh_shape)[2]
    else:
        # Without size-1 operand dims the operands hold exactly ``dims`` (one owner per mesh
        # dim, divisibility checked above), so the forward merge changes nothing.
        om = _product(ol, dims, sizes, mesh_shape)
    return SpmdInfo([attr(x, xm), attr(y, ym)], [attr(out, om)])


__all__ = ["Contraction", "OperandReading", "contract", "forward", "merge", "reverse", "swap_last2",
           "swapped_letters"]
