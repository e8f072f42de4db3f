"""Row normalisations: layer_norm and fused_rms_norm, one description.

A norm splits x's dims at ``begin_norm_axis`` (bna): the leading dims ``a..`` index independent
rows, the trailing dims are normalised together. As notation (Paddle's): ``a..1..,w,w -> a..1..,a..,a..``
where '1' marks a normalised dim, which is never sharded but still claims its mesh dim in reverse
merges, ``w`` is the flattened parameter (scale, bias: always replicated) and the statistics (mean,
variance / invvar) have the leading dims only. fused_rms_norm is the same with bna = rank - 1, a
scale only and one statistic. Partial inputs are resharded to replicated: normalising is not linear.
"""

from __future__ import annotations

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine import einsum
from spmdrules.engine.described import ranks, register_described
from spmdrules.engine.description import Description
from spmdrules.engine.policy import Policy
from spmdrules.engine.registry import A, Opt, T

Shape = tuple[int, ...]
_ROW_LETTERS = "abcdefghijlopqrstuvwxyz"
#: the outputs' normalised dims merge as Paddle's one shared letter '1' in reverse
NORM_POLICY = Policy(reverse_claims_broadcast=True)


def _check_x(x: Shape, bna: int, op_attr: str) -> None:
    if not 0 <= bna < len(x):
        raise RuleArgumentError(
            f"{op_attr} {bna} is out of range for 'x' of rank {len(x)}; use "
            f"0..{len(x) - 1} (the first normalised dim of x)"
        )


def _check_param(name: str, p: Shape | None, x: Shape, bna: int) -> None:
    if p is None:
        return
    size = 1
    for n in x[bna:]:
        size *= n
    if p != (size,):
        raise RuleArgumentError(
            f"{name!r} has shape {list(p)} but must be 1-D of size {size} (the product of "
            f"x's normalised dims {list(x[bna:])}); pass None if there is no {name}"
        )


def _check_stat(name: str, s: Shape, x: Shape, bna: int) -> None:
    if s != x[:bna]:
        raise RuleArgumentError(
            f"{name!r} has shape {list(s)} but must have x's leading dims "
            f"{list(x[:bna])} (rank begin_norm_axis = {bna})"
        )


def _absent_if_rank0(p: Shape | None) -> Shape | None:
    """A 0-d scale or bias stands for "absent" (the conformance README's ``rank0`` convention;
    a real 0-d parameter cannot run in the kernel). Forward refuses it, as Paddle does; reverse
    reads it as absent, as Paddle does, and hands it back replicated."""
    return None if p == () else p


def _x_letters(ndim: int, bna: int) -> str:
    if bna > len(_ROW_LETTERS):
        raise RuleArgumentError(f"{bna} row dims exceed the {len(_ROW_LETTERS)} letters")
    return _ROW_LETTERS[:bna] + einsum.BROADCAST * (ndim - bna)


def norm(x: Shape, params: tuple[Shape | None, ...], n_stats: int, bna: int) -> Description:
    """``ab11,w,w->ab11,ab,ab``: rows ``a..`` kept, normalised dims '1' (replicated; they claim
    their mesh dims in reverse), the parameters ``w`` whole (a 0-d one, read as absent in
    reverse, is handed back replicated)."""
    xl = _x_letters(len(x), bna)
    return Description(
        (xl, *(None if p is None else "" if p == () else "w" for p in params)),
        (xl, *((xl[:bna],) * n_stats)), whole=frozenset("w"), policy=NORM_POLICY)


def _check_reverse(x: Shape, params: tuple[tuple[str, Shape | None], ...], out: Shape,
                   stats: dict[str, Shape], bna: int, op_attr: str) -> None:
    _check_x(x, bna, op_attr)
    for name, p in params:
        _check_param(name, _absent_if_rank0(p), x, bna)
    if out != x:
        raise RuleArgumentError(
            f"'out' has shape {list(out)} but 'x' has {list(x)}; a norm keeps the shape"
        )
    for name, s in stats.items():
        _check_stat(name, s, x, bna)


# ---- layer_norm(x, scale?, bias?) -> out, mean, variance ----------------------------------------
def layer_norm(x: Shape, scale: Shape | None, bias: Shape | None, begin_norm_axis: int
               ) -> Description:
    return norm(x, (scale, bias), 2, begin_norm_axis)


def _check_layer_norm_forward(x: Shape, scale: Shape | None, bias: Shape | None, epsilon: float,
                        begin_norm_axis: int) -> None:
    _check_x(x, begin_norm_axis, "begin_norm_axis")
    _check_param("scale", scale, x, begin_norm_axis)
    _check_param("bias", bias, x, begin_norm_axis)


def _check_layer_norm_reverse(x: Shape, scale: Shape | None, bias: Shape | None, out: Shape,
                        mean: Shape, variance: Shape, epsilon: float, begin_norm_axis: int
                        ) -> None:
    _check_reverse(x, (("scale", scale), ("bias", bias)), out,
                   {"mean": mean, "variance": variance}, begin_norm_axis, "begin_norm_axis")


# ---- fused_rms_norm(x, scale) -> out, invvar: bna is the last dim --------------------------------
def rms_norm(x: Shape, scale: Shape) -> Description:
    return norm(x, (scale,), 1, len(x) - 1)


def _check_rms_norm_forward(x: Shape, scale: Shape, epsilon: float) -> None:
    _check_x(x, len(x) - 1, "the last dim")
    _check_param("scale", scale, x, len(x) - 1)


def _check_rms_norm_reverse(x: Shape, scale: Shape, out: Shape, invvar: Shape, epsilon: float) -> None:
    _check_rms_norm_forward(x, scale, epsilon)  # a 0-d scale is no "absent" here: the scale is required
    _check_reverse(x, (("scale", scale),), out,
                   {"invvar": invvar}, len(x) - 1, "the last dim")


register_described(
    "layer_norm", layer_norm, inputs=[T("x"), Opt("scale"), Opt("bias")],
    outputs=[T("out"), T("mean"), T("variance")],
    attrs=[A("epsilon", "float", 1e-5), A("begin_norm_axis", "int", 1)], key=ranks,
    check_forward=_check_layer_norm_forward, check_reverse=_check_layer_norm_reverse,
    doc="LayerNormInferSpmd: dims from begin_norm_axis on are replicated; scale/bias replicated.",
)
register_described(
    "fused_rms_norm", rms_norm, inputs=[T("x"), T("scale")], outputs=[T("out"), T("invvar")],
    attrs=[A("epsilon", "float", 1e-5)], key=ranks,
    check_forward=_check_rms_norm_forward, check_reverse=_check_rms_norm_reverse,
    doc="RmsNormInferSpmd: the last dim is replicated; scale replicated.",
)
