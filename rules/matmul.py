"""Matrix products: matmul (matmul_v2), bmm and bmm's gradient rule, as descriptions.

The family is one einsum notation, built by Paddle's convention from the operand ranks: batch
letters broadcast from the right, then ``mk,kn->mn`` (``k`` alone for a 1-D operand); ``trans_x``
/ ``trans_y`` swap the last two letters of an operand as stored. The merge is the engine's
product policy (:mod:`spmdrules.engine.contraction`: co-sharding, the claim order, uneven letters,
size-1 dims, Paddle's reverse quirk), so forward and reverse are derived from the description;
the gradient rule re-runs the product's forward inference on the two products of the backward
pass (``dx = g @ y^T``, ``dy = x^T @ g``).

Our one deviation from Paddle's policy (``keeps-uneven-shard``, as for every family): an uneven
batch letter or ``k`` keeps its mesh dims too. Blocks of any size multiply exactly, and the
partial sums of uneven ``k`` blocks add up to the product; only a size-1 letter split into
several parts is replicated (nothing to split). ``even=True`` is Paddle's policy
(``Contraction.paddle_even``), kept to recognise its answers.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Final

from spmdrules.core.attr import MultiDims
from spmdrules.core.errors import RuleArgumentError, ShardingConflictError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine import einsum
from spmdrules.engine.contraction import Contraction, contract, swap_last2, swapped_letters
from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description, infer_forward, infer_reverse
from spmdrules.engine.registry import A, T, register_rule
from spmdrules.engine.rulekit import attr

MATMUL_OPS: Final = ("matmul", "matmul_v2")
#: our policy for matrix products (uneven batch letters and k keep their shards)
PRODUCT: Final = Contraction()

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


# ---- the description -----------------------------------------------------------------------------
def describe_matmul(x: tuple[int, ...], y: tuple[int, ...], *, trans_x: bool = False,
                    trans_y: bool = False, policy: Contraction = PRODUCT) -> Description:
    """The operands' letters as stored (``trans_x`` swaps x's last two) and the product's."""
    if trans_x or trans_y:
        _check_trans(len(x), trans_x, "x")
        _check_trans(len(y), trans_y, "y")
    xl, yl, ol = notation(len(x), len(y))
    _check_shapes(xl, swap_last2(x, trans_x), yl, swap_last2(y, trans_y))
    return Description(
        (swapped_letters(xl, trans_x), swapped_letters(yl, trans_y)), (ol,),
        contraction=dataclasses.replace(policy, reverse_swapped=(trans_x, trans_y)),
        names=("x", "y", "out"))


def product_shape(x: tuple[int, ...], y: tuple[int, ...], trans_x: bool = False,
                  trans_y: bool = False) -> tuple[int, ...]:
    """The global shape of matmul(x, y) for operand shapes as stored."""
    xs, ys = swap_last2(x, trans_x and len(x) > 1), swap_last2(y, trans_y and len(y) > 1)
    xl, yl, ol = notation(len(xs), len(ys))
    sizes = _check_shapes(xl, xs, yl, ys)
    return tuple(sizes[ch] for ch in ol)


def _policy(even: bool) -> Contraction:
    return PRODUCT.paddle_even() if even else PRODUCT


def matmul_forward(x: TensorSpec, y: TensorSpec, trans_x: bool, trans_y: bool,
                   even: bool = False) -> SpmdInfo:
    """The registered forward inference, or with Paddle's even policy (``even=True``)."""
    return infer_forward(
        describe_matmul(x.shape, y.shape, trans_x=trans_x, trans_y=trans_y, policy=_policy(even)),
        (x, y))


def matmul_reverse(
    x: TensorSpec, y: TensorSpec, out: TensorSpec, trans_x: bool, trans_y: bool,
    even: bool = False,
) -> SpmdInfo:
    """The registered reverse inference, or with Paddle's even policy (``even=True``)."""
    return infer_reverse(
        describe_matmul(x.shape, y.shape, trans_x=trans_x, trans_y=trans_y, policy=_policy(even)),
        (x, y), (out,))


# ---- bmm and its gradient rule -------------------------------------------------------------------
def _check_bmm(x: tuple[int, ...], y: tuple[int, ...], g: tuple[int, ...] | None = None) -> None:
    for name, s in (("x", x), ("y", y)):
        if len(s) != 3:
            raise RuleArgumentError(
                f"{name!r} must be a 3-D [batch, rows, cols] tensor, got rank {len(s)}"
            )
    if x[0] != y[0]:
        raise RuleArgumentError(
            f"'x' has batch size {x[0]} but 'y' has {y[0]}; bmm does not broadcast"
        )
    if x[2] != y[1]:
        raise RuleArgumentError(f"'x' dim 2 (size {x[2]}) must equal 'y' dim 1 (size {y[1]})")
    if g is not None and g != (x[0], x[1], y[2]):
        raise RuleArgumentError(
            f"'out_grad' has shape {list(g)} but x @ y has shape {[x[0], x[1], y[2]]}"
        )


def describe_bmm(x: tuple[int, ...], y: tuple[int, ...], *, policy: Contraction = PRODUCT
                 ) -> Description:
    """matmul of 3-D operands, without transposes or broadcasting."""
    _check_bmm(x, y)
    return Description(("amk", "akn"), ("amn",), contraction=policy, names=("x", "y", "out"))


def bmm_forward(x: TensorSpec, y: TensorSpec, even: bool = False) -> SpmdInfo:
    """The registered forward inference, or with Paddle's even policy (``even=True``)."""
    return infer_forward(describe_bmm(x.shape, y.shape, policy=_policy(even)), (x, y))


def bmm_grad(x: TensorSpec, y: TensorSpec, out_grad: TensorSpec, even: bool = False) -> SpmdInfo:
    """BmmGradInferSpmd: dx = g @ y^T and dy = x^T @ g, each inferred forward.

    x and y first take the layout forward inference gives them (input partials dropped); the two
    products must then agree on every operand they share, else Paddle refuses (``verify error``):
    there is no single layout of g that serves both products.
    """
    _check_bmm(x.shape, y.shape, out_grad.shape)
    if not even:
        try:
            return _bmm_grad(x, y, out_grad, PRODUCT)
        except ShardingConflictError:
            # keeping an uneven shard can make the two products disagree: fall back to the even
            # policy (Paddle's) rather than refuse
            pass
    return _bmm_grad(x, y, out_grad, PRODUCT.paddle_even())


def _bmm_grad(x: TensorSpec, y: TensorSpec, out_grad: TensorSpec, c: Contraction) -> SpmdInfo:
    mesh = x.attr.mesh.shape
    gm = out_grad.attr.multi_dims_mapping
    xl, yl, ol = notation(3, 3)
    xm, ym, _, _ = contract(c, xl, x.shape, x.attr.multi_dims_mapping, yl, y.shape,
                            y.attr.multi_dims_mapping, ol, mesh)
    dx_g, dx_y, dx_m, dx_p = contract(c, xl, out_grad.shape, gm, swapped_letters(yl, True),
                                      y.shape, ym, ol, mesh)
    dy_x, dy_g, dy_m, dy_p = contract(c, swapped_letters(xl, True), x.shape, xm, yl,
                                      out_grad.shape, gm, ol, mesh)
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
    register_described(
        _name, describe_matmul, inputs=[T("x"), T("y")], outputs=[T("out")],
        attrs=_MATMUL_ATTRS, masks=True,
        doc="MatmulInferSpmd / MatmulInferSpmdReverse: batch letters + 'mk,kn->mn'.",
    )

register_described(
    "bmm", describe_bmm, inputs=[T("x"), T("y")], outputs=[T("out")], masks=True, reverse=False,
    doc="BmmInferSpmd: rank-3 matmul without transposes or broadcasting.",
)
register_rule(
    "bmm_grad", forward=bmm_grad, inputs=[T("x"), T("y"), T("out_grad")],
    outputs=[T("x_grad"), T("y_grad")],
    doc="BmmGradInferSpmd: dx = g @ y^T, dy = x^T @ g, each inferred by the matmul rule.",
)
