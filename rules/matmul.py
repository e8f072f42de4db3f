"""Matrix products: matmul (matmul_v2), bmm and bmm's gradient rule.

The family is one einsum notation, built by Paddle's convention from the operand ranks: batch
letters broadcast from the right, then ``mk,kn->mn`` (``k`` alone for a 1-D operand); ``trans_x``
/ ``trans_y`` swap the last two dims of an operand's shape and mapping. Forward inference merges
the operands' mesh dims per letter; reverse inference reads the operands off the output's letters
and returns the output they produce (a forward of them); the gradient rule re-runs forward
inference on the two products of the backward pass (``dx = g @ y^T``, ``dy = x^T @ g``).

Paddle's merge policy for matrix products (``ShardingMergeForTensorsMatmul``, reconstructed from
the recorded cases and probes of Paddle 3.3.1; docs/deviations/matmul.md):

* a batch letter or ``k`` that x and y shard differently is co-sharded over both claims (larger
  mesh dims first); if that does not divide its size, the claim that splits it more is kept if it
  divides, else none;
* a mesh dim wanted by several letters goes to a batch letter one operand shards (the higher-rank
  operand's first), then to a co-sharded batch letter, then to the larger of ``m`` and ``n`` (``m``
  on a tie), and to the contracted ``k`` last: sharding ``k`` costs an all-reduce;
* batch letters and ``k`` keep mesh dims only if their size divides evenly; ``m`` and ``n`` are
  never checked (an uneven split of a free dim is still a valid layout); size-1 dims of the
  operands are replicated, and (our deviation) so are those of the product.

Our one deviation from that policy (``keeps-uneven-shard``, as for every family): an uneven batch
letter or ``k`` keeps its mesh dims too. Blocks of any size multiply exactly, and the partial sums
of uneven ``k`` blocks add up to the product; only a size-1 letter split into several parts is
replicated (nothing to split). ``even=True`` is Paddle's policy, kept to recognise its answers.
"""

from __future__ import annotations

import functools
from typing import Final, TypeVar

from spmdrules.core.attr import DistAttr, MultiDims, PartialItems
from spmdrules.core.errors import RuleArgumentError, ShardingConflictError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine import einsum
from spmdrules.engine.masks import any_masked, carry, plain
from spmdrules.engine.registry import A, T, register_rule
from spmdrules.engine.rulekit import attr, shard_product

MATMUL_OPS: Final = ("matmul", "matmul_v2")
_FREE: Final = frozenset("mn")
_NON_BATCH: Final = frozenset("mnk")

LetterDims = dict[str, tuple[int, ...]]
_E = TypeVar("_E")
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


def _swap_last2(t: tuple[_E, ...], flag: bool) -> tuple[_E, ...]:
    if not flag:
        return t
    return (*t[:-2], t[-1], t[-2])


def _check_trans(ndim: int, trans: bool, name: str) -> None:
    if trans and ndim < 2:
        raise RuleArgumentError(
            f"trans_{name}=True needs {name!r} of rank >= 2, got rank {ndim}; pass "
            f"trans_{name}=False for a vector"
        )


def _check_shapes(xl: str, xs: tuple[int, ...], yl: str, ys: tuple[int, ...]) -> dict[str, int]:
    """Letter sizes; k must agree and batch dims must broadcast."""
    sizes = dict(zip(xl, xs))  # noqa: B905 - the notation has one letter per dim
    get = sizes.get
    for ch, n in zip(yl, ys):  # noqa: B905
        prev = get(ch)
        if prev is None or prev == n or prev == 1:
            sizes[ch] = n
        elif ch == "k":
            raise RuleArgumentError(
                f"the contracted dim of 'x' has size {prev} but 'y' dim {yl.index(ch)} has size "
                f"{n}; x's columns must match y's rows (check trans_x / trans_y)"
            )
        elif n != 1:
            raise RuleArgumentError(
                f"batch dim of size {prev} in 'x' and 'y' dim {yl.index(ch)} of size {n} do not "
                "broadcast; sizes must match or one must be 1"
            )
    return sizes


# ---- the merge -----------------------------------------------------------------------------------
def _claims(letters: str, mdm: MultiDims) -> dict[str, tuple[int, ...]]:
    return {ch: dims for ch, dims in zip(letters, mdm) if dims}  # noqa: B905 - equal by notation


def _keeps(size: int, count: int, even: bool) -> bool:
    """May a batch letter or ``k`` of ``size`` be cut into ``count`` blocks?"""
    return size % count == 0 or (not even and size > 1)


def _merge(
    xl: str, xm: MultiDims, yl: str, ym: MultiDims, sizes: dict[str, int],
    mesh_shape: tuple[int, ...], even: bool = False,
) -> LetterDims:
    """Paddle's matmul merge (see the module doc): per letter, the mesh dims it keeps."""
    # The common case in one pass: no letter and no mesh dim is contested, so only divisibility
    # remains to check.
    merged = {ch: dims for ch, dims in zip(yl, ym) if dims}  # noqa: B905 - equal by notation
    for ch, dims in zip(xl, xm):  # noqa: B905
        if dims:
            prev = merged.get(ch)
            if prev is not None and prev != dims:
                break
            merged[ch] = dims
    else:
        used = [d for dims in merged.values() for d in dims]
        if len(used) == len(set(used)):
            return {
                ch: dims for ch, dims in merged.items()
                if ch in _FREE or _keeps(sizes[ch], shard_product(mesh_shape, dims), even)
            }
    xc = _claims(xl, xm)
    yc = _claims(yl, ym)
    contested = [ch for ch, dims in xc.items() if yc.get(ch, dims) != dims]
    owner: dict[int, str] = {}
    out: LetterDims = {}
    for ch in _priority(xl, yl, xc, yc, contested, sizes):
        if ch in contested:
            dims = _coshard(
                [d for d in xc[ch] if d not in owner], [d for d in yc[ch] if d not in owner],
                sizes[ch], mesh_shape, even,
            )
        else:
            dims = tuple(d for d in xc.get(ch) or yc[ch] if d not in owner)
            if ch not in _FREE and not _keeps(sizes[ch], shard_product(mesh_shape, dims), even):
                continue
        if dims:
            out[ch] = dims
            for d in dims:
                owner[d] = ch
    return out


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


def _priority(
    xl: str, yl: str, xc: dict[str, tuple[int, ...]], yc: dict[str, tuple[int, ...]],
    contested: list[str], sizes: dict[str, int],
) -> list[str]:
    """Batch letters first (the higher-rank operand's, then co-sharded ones), then m/n, then k."""
    first, second = (yc, xc) if len(yl) > len(xl) else (xc, yc)
    order = [ch for ch in first if ch not in _NON_BATCH and ch not in contested]
    order += [ch for ch in second if ch not in _NON_BATCH and ch not in contested and ch not in order]
    order += [ch for ch in contested if ch != "k"]
    if "m" in xc:
        order.append("m")
    if "n" in yc:
        if "m" in xc and sizes["n"] > sizes["m"]:
            order.insert(len(order) - 1, "n")
        else:
            order.append("n")
    if "k" in xc or "k" in yc:
        order.append("k")
    return order


# ---- attributes ----------------------------------------------------------------------------------
def _mapping(letters: str, dims: LetterDims, shape: tuple[int, ...]) -> MultiDims:
    """An operand's mapping; Paddle replicates its size-1 dims (nothing to split)."""
    get = dims.get
    if 1 in shape:
        return tuple([() if n == 1 else get(ch, ()) for ch, n in zip(letters, shape, strict=True)])
    return tuple([get(ch, ()) for ch in letters])


def _input_mapping(
    letters: str, dims: LetterDims, shape: tuple[int, ...], trans: bool
) -> MultiDims:
    return _swap_last2(_mapping(letters, dims, shape), trans)


Inferred = tuple[MultiDims, MultiDims, MultiDims, PartialItems]


def _infer(
    x_shape: tuple[int, ...], x_mdm: MultiDims, y_shape: tuple[int, ...], y_mdm: MultiDims,
    trans_x: bool, trans_y: bool, mesh_shape: tuple[int, ...], even: bool = False,
) -> Inferred:
    """Forward inference on raw shapes and mappings: (x, y, out) mappings and out's partial."""
    if trans_x or trans_y:
        _check_trans(len(x_shape), trans_x, "x")
        _check_trans(len(y_shape), trans_y, "y")
        xs, xm = _swap_last2(x_shape, trans_x), _swap_last2(x_mdm, trans_x)
        ys, ym = _swap_last2(y_shape, trans_y), _swap_last2(y_mdm, trans_y)
    else:
        xs, xm, ys, ym = x_shape, x_mdm, y_shape, y_mdm
    xl, yl, ol = notation(len(xs), len(ys))
    sizes = _check_shapes(xl, xs, yl, ys)
    dims = _merge(xl, xm, yl, ym, sizes, mesh_shape, even)
    xm, ym = _mapping(xl, dims, xs), _mapping(yl, dims, ys)
    return (
        _swap_last2(xm, trans_x),
        _swap_last2(ym, trans_y),
        _out_mapping(ol, dims, sizes, mesh_shape),
        einsum.contracted_partial(((xl, xm), (yl, ym)), ol),
    )


def _out_mapping(
    letters: str, dims: LetterDims, sizes: dict[str, int], mesh_shape: tuple[int, ...]
) -> MultiDims:
    """The product's mapping. A size-1 dim split into several parts is replicated: every operand
    holds it whole, so every local product does (deviation ``matmul-size-one-output-shard``)."""
    get = dims.get
    if 1 in sizes.values():
        return tuple([
            () if sizes[ch] == 1 and shard_product(mesh_shape, get(ch, ())) > 1 else get(ch, ())
            for ch in letters
        ])
    return tuple([get(ch, ()) for ch in letters])


def matmul_forward(x: TensorSpec, y: TensorSpec, trans_x: bool, trans_y: bool,
                   even: bool = False) -> SpmdInfo:
    mesh = x.attr.mesh
    xm, ym, om, part = _infer(
        x.shape, x.attr.multi_dims_mapping, y.shape, y.attr.multi_dims_mapping, trans_x, trans_y,
        mesh.shape, even,
    )
    return SpmdInfo([attr(x, xm), attr(y, ym)], [DistAttr._make(mesh, om, part)])


def _masked_product(x: TensorSpec, y: TensorSpec, trans_x: bool, trans_y: bool, even: bool
                    ) -> SpmdInfo:
    """The product of operands that may be masked sums (``spmdrules.engine.masks``): a sum
    masked by a letter the product keeps (a batch letter, ``m`` or ``n``) times an operand whole
    on its mesh dim, or times one masked by the same letter, is a masked sum."""
    if not any_masked(x, y):
        return matmul_forward(x, y, trans_x, trans_y, even)
    info = matmul_forward(plain(x), plain(y), trans_x, trans_y, even)
    xl, yl, ol = notation(x.ndim, y.ndim)
    stored_x = "".join(_swap_last2(tuple(xl), trans_x)) if x.ndim > 1 else xl
    stored_y = "".join(_swap_last2(tuple(yl), trans_y)) if y.ndim > 1 else yl
    return carry(info, [(x, stored_x), (y, stored_y)], [ol], product=True)


def _matmul_rule(x: TensorSpec, y: TensorSpec, trans_x: bool, trans_y: bool) -> SpmdInfo:
    return _masked_product(x, y, trans_x, trans_y, False)


def matmul_reverse(
    x: TensorSpec, y: TensorSpec, out: TensorSpec, trans_x: bool, trans_y: bool,
    even: bool = False,
) -> SpmdInfo:
    xs, ys = x.shape, y.shape
    if trans_x or trans_y:
        _check_trans(len(xs), trans_x, "x")
        _check_trans(len(ys), trans_y, "y")
        xs, ys = _swap_last2(xs, trans_x), _swap_last2(ys, trans_y)
    if len(out.shape) != max(len(xs), len(ys)):
        raise RuleArgumentError(
            f"'out' has rank {len(out.shape)} but the reverse rule needs rank "
            f"max(rank x, rank y) = {max(len(xs), len(ys))} (Paddle does not infer back through a "
            "1-D operand's dropped dim)"
        )
    xl, yl, ol = notation(len(xs), len(ys))
    if len(ol) != len(out.shape):
        raise RuleArgumentError(
            f"'out' of rank {len(out.shape)} cannot be the product of a rank-{len(xs)} 'x' and a "
            f"rank-{len(ys)} 'y' (that has rank {len(ol)}); the reverse rule needs operands of "
            "rank >= 2"
        )
    sizes = _check_shapes(xl, xs, yl, ys)
    want = tuple([sizes[ch] for ch in ol])
    if out.shape != want:
        raise RuleArgumentError(
            f"'out' has shape {list(out.shape)} but the product of 'x' and 'y' has shape "
            f"{list(want)}"
        )
    mesh_shape = out.attr.mesh.shape
    dims: LetterDims = {}
    for ch, n, md in zip(ol, out.shape, out.attr.multi_dims_mapping, strict=True):
        if md:
            p = 1
            for d in md:
                p *= mesh_shape[d]
            if n % p == 0 or (not even and n > 1):
                dims[ch] = md
    # Paddle tests for size-1 dims on the operands' stored (untransposed) shapes here.
    xm = _input_mapping(xl, dims, x.shape, trans_x)
    ym = _input_mapping(yl, dims, y.shape, trans_y)
    # The output is what these operands produce (forward of them; k is replicated, so no partial).
    # Paddle echoes the given out instead (deviation matmul-reverse-out).
    if 1 in x.shape or 1 in y.shape:
        om = _infer(x.shape, xm, y.shape, ym, trans_x, trans_y, mesh_shape, even)[2]
    else:
        # Without size-1 operand dims the operands hold exactly ``dims`` (one owner per mesh
        # dim, divisibility checked above), so the forward merge changes nothing.
        om = _out_mapping(ol, dims, sizes, mesh_shape)
    return SpmdInfo([attr(x, xm), attr(y, ym)], [attr(out, om)])


# ---- bmm and its gradient rule -------------------------------------------------------------------
def _check_bmm(**tensors: TensorSpec) -> None:
    for name, t in tensors.items():
        if len(t.shape) != 3:
            raise RuleArgumentError(
                f"{name!r} must be a 3-D [batch, rows, cols] tensor, got rank {len(t.shape)}"
            )
    x, y = tensors["x"], tensors["y"]
    if x.shape[0] != y.shape[0]:
        raise RuleArgumentError(
            f"'x' has batch size {x.shape[0]} but 'y' has {y.shape[0]}; bmm does not broadcast"
        )
    if x.shape[2] != y.shape[1]:
        raise RuleArgumentError(
            f"'x' dim 2 (size {x.shape[2]}) must equal 'y' dim 1 (size {y.shape[1]})"
        )
    g = tensors.get("out_grad")
    if g is not None and g.shape != (x.shape[0], x.shape[1], y.shape[2]):
        raise RuleArgumentError(
            f"'out_grad' has shape {list(g.shape)} but x @ y has shape "
            f"{[x.shape[0], x.shape[1], y.shape[2]]}"
        )


def bmm_forward(x: TensorSpec, y: TensorSpec, even: bool = False) -> SpmdInfo:
    _check_bmm(x=x, y=y)
    return _masked_product(x, y, False, False, even)


def bmm_grad(x: TensorSpec, y: TensorSpec, out_grad: TensorSpec, even: bool = False) -> SpmdInfo:
    """BmmGradInferSpmd: dx = g @ y^T and dy = x^T @ g, each inferred forward.

    x and y first take the layout forward inference gives them (input partials dropped); the two
    products must then agree on every operand they share, else Paddle refuses (``verify error``):
    there is no single layout of g that serves both products.
    """
    _check_bmm(x=x, y=y, out_grad=out_grad)
    if not even:
        try:
            return _bmm_grad(x, y, out_grad, False)
        except ShardingConflictError:
            # keeping an uneven shard can make the two products disagree: fall back to the even
            # policy (Paddle's) rather than refuse
            pass
    return _bmm_grad(x, y, out_grad, True)


def _bmm_grad(x: TensorSpec, y: TensorSpec, out_grad: TensorSpec, even: bool) -> SpmdInfo:
    mesh = x.attr.mesh.shape
    gm = out_grad.attr.multi_dims_mapping
    xm, ym, _, _ = _infer(x.shape, x.attr.multi_dims_mapping, y.shape, y.attr.multi_dims_mapping,
                          False, False, mesh, even)
    dx_g, dx_y, dx_m, dx_p = _infer(out_grad.shape, gm, y.shape, ym, False, True, mesh, even)
    dy_x, dy_g, dy_m, dy_p = _infer(x.shape, xm, out_grad.shape, gm, True, False, mesh, even)
    for what, got, want in (
        ("'y' as dx = out_grad @ y^T needs it", dx_y, ym),
        ("'x' as dy = x^T @ out_grad needs it", dy_x, xm),
        ("'out_grad' as dy = x^T @ out_grad needs it", dy_g, dx_g),
    ):
        if got != want:
            raise ShardingConflictError(
                f"the gradient products disagree on the layout of {what} "
                f"{_fmt(got)}, but {_fmt(want)} elsewhere; reshard out_grad (or x, y) so that "
                "both products can use one layout"
            )
    return SpmdInfo(
        [attr(x, dy_x), attr(y, dx_y), attr(x, dx_g)],
        [attr(x, dx_m, dx_p), attr(x, dy_m, dy_p)],
    )


def _fmt(m: MultiDims) -> str:
    return "[" + ",".join(
        "-1" if not d else str(d[0]) if len(d) == 1 else str(list(d)) for d in m
    ) + "]"


# ---- registration --------------------------------------------------------------------------------
_MATMUL_ATTRS = [A("trans_x", "bool", False), A("trans_y", "bool", False)]

for _name in MATMUL_OPS:
    register_rule(
        _name, forward=_matmul_rule, reverse=matmul_reverse, inputs=[T("x"), T("y")],
        outputs=[T("out")], attrs=_MATMUL_ATTRS, masks=True,
        doc="MatmulInferSpmd / MatmulInferSpmdReverse: batch letters + 'mk,kn->mn'.",
    )

register_rule(
    "bmm", forward=bmm_forward, inputs=[T("x"), T("y")], outputs=[T("out")], masks=True,
    doc="BmmInferSpmd: rank-3 matmul without transposes or broadcasting.",
)
register_rule(
    "bmm_grad", forward=bmm_grad, inputs=[T("x"), T("y"), T("out_grad")],
    outputs=[T("x_grad"), T("y_grad")],
    doc="BmmGradInferSpmd: dx = g @ y^T, dy = x^T @ g, each inferred by the matmul rule.",
)
