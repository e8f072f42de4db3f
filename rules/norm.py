"""Row normalisations: layer_norm and fused_rms_norm, one description.

A norm splits x's dims at ``begin_norm_axis`` (bna): the leading dims ``a..`` index independent
rows, the trailing dims are normalised together. As notation (Paddle's): ``a..1..,w,w -> a..1..,a..,a..``
where '1' marks a normalised dim, which is never sharded but still claims its mesh dim in reverse
merges, ``w`` is the flattened parameter (scale, bias: always replicated) and the statistics (mean,
variance / invvar) have the leading dims only. fused_rms_norm is the same with bna = rank - 1, a
scale only and one statistic. Partial inputs are resharded to replicated: normalising is not linear.
"""

from __future__ import annotations

from spmdrules.core.attr import DistAttr, MultiDims
from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine import einsum
from spmdrules.engine.registry import A, Opt, T, register_rule
from spmdrules.engine.rulekit import attr

_ROW_LETTERS = "abcdefghijlopqrstuvwxyz"


def _check_x(x: TensorSpec, bna: int, op_attr: str) -> None:
    if not 0 <= bna < len(x.shape):
        raise RuleArgumentError(
            f"{op_attr} {bna} is out of range for 'x' of rank {len(x.shape)}; use "
            f"0..{len(x.shape) - 1} (the first normalised dim of x)"
        )


def _check_param(name: str, p: TensorSpec | None, x: TensorSpec, bna: int) -> None:
    if p is None:
        return
    size = 1
    for n in x.shape[bna:]:
        size *= n
    if p.shape != (size,):
        raise RuleArgumentError(
            f"{name!r} has shape {list(p.shape)} but must be 1-D of size {size} (the product of "
            f"x's normalised dims {list(x.shape[bna:])}); pass None if there is no {name}"
        )


def _check_stat(name: str, s: TensorSpec, x: TensorSpec, bna: int) -> None:
    if s.shape != x.shape[:bna]:
        raise RuleArgumentError(
            f"{name!r} has shape {list(s.shape)} but must have x's leading dims "
            f"{list(x.shape[:bna])} (rank begin_norm_axis = {bna})"
        )


def _param_attr(p: TensorSpec | None) -> DistAttr | None:
    return None if p is None else attr(p, ((),) * p.ndim)


def _absent_if_rank0(p: TensorSpec | None) -> TensorSpec | None:
    """A 0-d scale or bias stands for "absent" (the conformance README's ``rank0`` convention;
    a real 0-d parameter cannot run in the kernel). Forward refuses it, as Paddle does; reverse
    reads it as absent, as Paddle does, and hands it back replicated."""
    return None if p is not None and p.ndim == 0 else p


def _x_letters(ndim: int, bna: int) -> str:
    if bna > len(_ROW_LETTERS):
        raise RuleArgumentError(f"{bna} row dims exceed the {len(_ROW_LETTERS)} letters")
    return _ROW_LETTERS[:bna] + einsum.BROADCAST * (ndim - bna)


def _forward(
    x: TensorSpec, params: tuple[TensorSpec | None, ...], n_stats: int, bna: int
) -> SpmdInfo:
    m = x.attr.multi_dims_mapping
    xm: MultiDims = m[:bna] + ((),) * (len(m) - bna)
    stat = attr(x, xm[:bna])
    return SpmdInfo(
        (attr(x, xm), *(_param_attr(p) for p in params)),
        (attr(x, xm), *((stat,) * n_stats)),
    )


def _reverse(
    x: TensorSpec,
    params: tuple[TensorSpec | None, ...],
    out: TensorSpec,
    stats: tuple[TensorSpec, ...],
    stat_names: tuple[str, ...],
    bna: int,
) -> SpmdInfo:
    if out.shape != x.shape:
        raise RuleArgumentError(
            f"'out' has shape {list(out.shape)} but 'x' has {list(x.shape)}; a norm keeps the shape"
        )
    for name, s in zip(stat_names, stats, strict=True):
        _check_stat(name, s, x, bna)
    xl = _x_letters(len(x.shape), bna)
    sl = xl[:bna]
    letters = einsum.merge(
        ((xl, out.attr.multi_dims_mapping),
         *((sl, s.attr.multi_dims_mapping) for s in stats)),
        names=("out", *stat_names),
    )
    # A normalised dim ('1') keeps the mesh dim it claimed first: Paddle's merge order.
    letters = einsum.resolve_mesh_conflicts(letters)
    xm = einsum.mapping_for(xl, letters)
    sm = einsum.mapping_for(sl, letters)
    return SpmdInfo(
        (attr(x, xm), *(_param_attr(p) for p in params)),
        (attr(out, xm), *(attr(s, sm) for s in stats)),
    )


# ---- layer_norm(x, scale?, bias?) -> out, mean, variance ----------------------------------------
def layer_norm_forward(
    x: TensorSpec, scale: TensorSpec | None, bias: TensorSpec | None, epsilon: float,
    begin_norm_axis: int,
) -> SpmdInfo:
    _check_x(x, begin_norm_axis, "begin_norm_axis")
    _check_param("scale", scale, x, begin_norm_axis)
    _check_param("bias", bias, x, begin_norm_axis)
    return _forward(x, (scale, bias), 2, begin_norm_axis)


def layer_norm_reverse(
    x: TensorSpec, scale: TensorSpec | None, bias: TensorSpec | None, out: TensorSpec,
    mean: TensorSpec, variance: TensorSpec, epsilon: float, begin_norm_axis: int,
) -> SpmdInfo:
    _check_x(x, begin_norm_axis, "begin_norm_axis")
    _check_param("scale", _absent_if_rank0(scale), x, begin_norm_axis)
    _check_param("bias", _absent_if_rank0(bias), x, begin_norm_axis)
    return _reverse(
        x, (scale, bias), out, (mean, variance), ("mean", "variance"), begin_norm_axis
    )


# ---- fused_rms_norm(x, scale) -> out, invvar: bna is the last dim --------------------------------
def rms_norm_forward(x: TensorSpec, scale: TensorSpec, epsilon: float) -> SpmdInfo:
    bna = len(x.shape) - 1
    _check_x(x, bna, "the last dim")
    _check_param("scale", scale, x, bna)
    return _forward(x, (scale,), 1, bna)


def rms_norm_reverse(
    x: TensorSpec, scale: TensorSpec, out: TensorSpec, invvar: TensorSpec, epsilon: float
) -> SpmdInfo:
    bna = len(x.shape) - 1
    _check_x(x, bna, "the last dim")
    _check_param("scale", scale, x, bna)
    return _reverse(x, (scale,), out, (invvar,), ("invvar",), bna)


register_rule(
    "layer_norm", forward=layer_norm_forward, reverse=layer_norm_reverse,
    inputs=[T("x"), Opt("scale"), Opt("bias")], outputs=[T("out"), T("mean"), T("variance")],
    attrs=[A("epsilon", "float", 1e-5), A("begin_norm_axis", "int", 1)],
    doc="LayerNormInferSpmd: dims from begin_norm_axis on are replicated; scale/bias replicated.",
)
register_rule(
    "fused_rms_norm", forward=rms_norm_forward, reverse=rms_norm_reverse,
    inputs=[T("x"), T("scale")], outputs=[T("out"), T("invvar")],
    attrs=[A("epsilon", "float", 1e-5)],
    doc="RmsNormInferSpmd: the last dim is replicated; scale replicated.",
)
