"""Matrix products: matmul (matmul_v2), bmm and bmm's gradient rule.

The family is one einsum notation, built by Paddle's convention from the operand ranks: batch
letters broadcast from the right, then ``mk,kn->mn`` (``k`` alone for a 1-D operand). Forward
inference merges the operands' mesh dims per letter; reverse inference reads the inputs off the
output's letters; the gradient rule re-runs forward inference on the two products of the backward
pass (``dx = g @ y^T``, ``dy = x^T @ g``).

Paddle's merge policy for matrix products (``ShardingMergeForTensorsMatmul``):

* a batch letter or ``k`` sharded differently by x and y is co-sharded over both mesh dims;
* batch letters and ``k`` keep their mesh dims only if their size divides evenly; ``m`` and ``n``
  are never checked (an uneven split of a free dim is still a valid layout);
* a mesh dim wanted by several letters goes to a batch letter first, then to the larger of ``m``
  and ``n`` (``m`` on a tie), and to the contracted ``k`` last: sharding ``k`` costs an all-reduce.
"""

from __future__ import annotations

import functools
from typing import Final

from spmdrules import einsum
from spmdrules.attr import MultiDims, PartialItems
from spmdrules.errors import RuleArgumentError
from spmdrules.registry import A, T, register_rule
from spmdrules.rulekit import attr
from spmdrules.spec import SpmdInfo, TensorSpec

MATMUL_OPS: Final = ("matmul", "matmul_v2")
_FREE: Final = frozenset("mn")

LetterDims = dict[str, tuple[int, ...]]
Notation3 = tuple[str, str, str]


# ---- the notation --------------------------------------------------------------------------------
@functools.lru_cache(maxsize=128)
def notation(x_ndim: int, y_ndim: int) -> Notation3:
    """Paddle's matmul notation for operand ranks, e.g. ``(3, 2) -> ('amk', 'kn', 'amn')``."""
    if x_ndim < 1 or y_ndim < 1:
        raise RuleArgumentError(
            f"matmul needs operands of rank >= 1, got 'x' of rank {x_ndim} and 'y' of rank "
            f"{y_ndim}; use multiply for scalars"
        )
    nb = max(x_ndim, y_ndim) - 2
    if nb > len(einsum.ALPHABET):
        raise RuleArgumentError(
            f"matmul supports at most {len(einsum.ALPHABET)} batch dims, got {nb}"
        )
    if x_ndim == 1 and y_ndim == 1:
        return "k", "k", ""
    if x_ndim == 1:
        yb = einsum.ALPHABET[:nb]
        return "k", yb + "kn", yb + "n"
    if y_ndim == 1:
        xb = einsum.ALPHABET[:nb]
        return xb + "mk", "k", xb + "m"
    xb = einsum.ALPHABET[nb - (x_ndim - 2) : nb]
    yb = einsum.ALPHABET[nb - (y_ndim - 2) : nb]
    return xb + "mk", yb + "kn", (xb if x_ndim > y_ndim else yb) + "mn"


def _swap_last2(t: tuple[int, ...] | MultiDims, flag: bool) -> tuple:  # type: ignore[type-arg]
    if not flag:
        return t
    return (*t[:-2], t[-1], t[-2])


def _oriented(t: TensorSpec, trans: bool, name: str) -> tuple[tuple[int, ...], MultiDims]:
    """Shape and mapping of an operand as the product sees it (last two dims swapped if trans)."""
    if trans and len(t.shape) < 2:
        raise RuleArgumentError(
            f"trans_{name}=True needs {name!r} of rank >= 2, got rank {len(t.shape)}; pass "
            f"trans_{name}=False for a vector"
        )
    return _swap_last2(t.shape, trans), _swap_last2(t.attr.multi_dims_mapping, trans)


def _check_shapes(xl: str, xs: tuple[int, ...], yl: str, ys: tuple[int, ...]) -> dict[str, int]:
    """Letter sizes; k must agree and batch dims must broadcast."""
    sizes: dict[str, int] = {}
    for ch, n in zip(xl, xs, strict=True):
        sizes[ch] = n
    for i, (ch, n) in enumerate(zip(yl, ys, strict=True)):
        prev = sizes.get(ch)
        if prev is None or prev == n:
            sizes[ch] = n
        elif ch == "k":
            raise RuleArgumentError(
                f"the contracted dim of 'x' has size {prev} but 'y' dim {i} has size {n}; "
                "x's columns must match y's rows (check trans_x / trans_y)"
            )
        elif prev == 1:
            sizes[ch] = n
        elif n != 1:
            raise RuleArgumentError(
                f"batch dim of size {prev} in 'x' and 'y' dim {i} of size {n} do not broadcast; "
                "sizes must match or one must be 1"
            )
    return sizes


# ---- the merge -----------------------------------------------------------------------------------
def _claims(pairs: tuple[tuple[str, MultiDims], ...]) -> dict[str, list[int]]:
    """Per letter, the mesh dims the operands shard it by, in the order met."""
    claims: dict[str, list[int]] = {}
    for letters, mdm in pairs:
        for ch, dims in zip(letters, mdm, strict=True):
            if dims:
                lst = claims.setdefault(ch, [])
                for d in dims:
                    if d not in lst:
                        lst.append(d)
    return claims


def _merge(
    claims: dict[str, list[int]], sizes: dict[str, int], mesh_shape: tuple[int, ...]
) -> LetterDims:
    """Paddle's matmul merge: co-shard, divisibility of batch/k letters, mesh-dim priorities."""
    kept: dict[str, list[int]] = {}
    for ch, dims in claims.items():
        if ch not in _FREE:
            n = 1
            for d in dims:
                n *= mesh_shape[d]
            if sizes[ch] % n:
                continue
            if len(dims) > 1:
                dims = sorted(dims, key=lambda d: -mesh_shape[d])
        kept[ch] = dims
    owner: dict[int, str] = {}
    out: LetterDims = {}
    for ch in _priority(kept, sizes):
        dims = tuple(d for d in kept[ch] if owner.setdefault(d, ch) == ch)
        if dims:
            out[ch] = dims
    return out


def _priority(kept: dict[str, list[int]], sizes: dict[str, int]) -> list[str]:
    batch = [ch for ch in kept if ch not in _FREE and ch != "k"]
    free = [ch for ch in "mn" if ch in kept]
    if len(free) == 2 and sizes["n"] > sizes["m"]:
        free = ["n", "m"]
    return batch + free + (["k"] if "k" in kept else [])


# ---- attributes ----------------------------------------------------------------------------------
def _mapping(letters: str, dims: LetterDims, shape: tuple[int, ...] | None) -> MultiDims:
    if shape is None:
        return tuple(dims.get(ch, ()) for ch in letters)
    return tuple(
        dims.get(ch, ()) if n != 1 else () for ch, n in zip(letters, shape, strict=True)
    )


def _input_mapping(
    letters: str, dims: LetterDims, shape: tuple[int, ...], trans: bool
) -> MultiDims:
    return _swap_last2(_mapping(letters, dims, shape), trans)  # type: ignore[no-any-return]


def _k_partial(dims: LetterDims) -> PartialItems:
    return tuple((d, "sum") for d in sorted(dims.get("k", ())))


def matmul_forward(x: TensorSpec, y: TensorSpec, trans_x: bool, trans_y: bool) -> SpmdInfo:
    xs, xm = _oriented(x, trans_x, "x")
    ys, ym = _oriented(y, trans_y, "y")
    xl, yl, ol = notation(len(xs), len(ys))
    sizes = _check_shapes(xl, xs, yl, ys)
    dims = _merge(_claims(((xl, xm), (yl, ym))), sizes, x.attr.mesh.shape)
    return SpmdInfo(
        [attr(x, _input_mapping(xl, dims, xs, trans_x)), attr(y, _input_mapping(yl, dims, ys, trans_y))],
        [attr(x, _mapping(ol, dims, None), _k_partial(dims))],
    )


def matmul_reverse(
    x: TensorSpec, y: TensorSpec, out: TensorSpec, trans_x: bool, trans_y: bool
) -> SpmdInfo:
    xs = _oriented(x, trans_x, "x")[0]
    ys = _oriented(y, trans_y, "y")[0]
    if len(out.shape) != max(len(xs), len(ys)):
        raise RuleArgumentError(
            f"'out' has rank {len(out.shape)} but the reverse rule needs rank "
            f"max(rank x, rank y) = {max(len(xs), len(ys))} (Paddle does not infer back through a "
            "1-D operand's dropped dim)"
        )
    xl, yl, ol = notation(len(xs), len(ys))
    sizes = _check_shapes(xl, xs, yl, ys)
    mesh_shape = out.attr.mesh.shape
    dims: LetterDims = {}
    for ch, n, md in zip(ol, out.shape, out.attr.multi_dims_mapping, strict=True):
        if md:
            if sizes.get(ch, n) != n and n != 1 and sizes.get(ch, 1) != 1:
                raise RuleArgumentError(
                    f"'out' has size {n} where the operands give {sizes[ch]}; out must have "
                    "the product's shape"
                )
            p = 1
            for d in md:
                p *= mesh_shape[d]
            if n % p == 0:
                dims[ch] = md
    return SpmdInfo(
        [attr(x, _input_mapping(xl, dims, xs, trans_x)), attr(y, _input_mapping(yl, dims, ys, trans_y))],
        [out.attr],
    )


# ---- registration --------------------------------------------------------------------------------
_MATMUL_ATTRS = [A("trans_x", "bool", False), A("trans_y", "bool", False)]

for _name in MATMUL_OPS:
    register_rule(
        _name, forward=matmul_forward, reverse=matmul_reverse, inputs=[T("x"), T("y")],
        outputs=[T("out")], attrs=_MATMUL_ATTRS, family="matmul",
        doc="MatmulInferSpmd / MatmulInferSpmdReverse: batch letters + 'mk,kn->mn'.",
    )
