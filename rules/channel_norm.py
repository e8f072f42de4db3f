"""Norms over channels: batch_norm, group_norm, instance_norm (and instance_norm's gradient rule).

x is laid out ``N C spatial..`` (or ``N spatial.. C`` for a channel-last ``data_format``). Each norm
keeps whole the dims it reduces over and lets only the others keep their shards, exactly as Paddle
3.3.1 merges x alone:

* batch_norm normalises each channel over the batch and every spatial dim: only C keeps its shard;
  ``mean``/``variance`` (and the running and saved statistics) are per channel (C's letter);
  ``scale``/``bias`` are replicated; ``reserve_space`` is replicated.
* group_norm normalises each (sample, group) over its channels and spatial dims: only N keeps its
  shard; ``mean``/``variance`` are ``[N, groups]``.
* instance_norm normalises each (sample, channel) over the spatial dims: N and C keep their shards;
  the saved statistics are ``[N, C]``.

Every other dim is whole, so no statistic is ever pending and partial inputs are resharded to
replicated (a norm is not linear). Each op is described once as data (letters plus ``whole``);
the instance_norm gradient rule (a pending sum of scale_grad/bias_grad over the sharded N and C,
which a single description cannot say for one output only) is written out.
"""

from __future__ import annotations

from spmdrules.core.attr import MultiDims
from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.registry import A, Opt, T, register_rule
from spmdrules.engine.rulekit import attr

Shape = tuple[int, ...]
#: data formats whose channel dim is the last (rank 2's "NC" is both)
CHANNEL_LAST = ("NHWC", "NLC", "NDHWC", "NWC")


def channel_axis(ndim: int, data_format: str) -> int:
    """The channel dim of an ``ndim``-D x in ``data_format``."""
    return ndim - 1 if data_format in CHANNEL_LAST else 1


def _check_x(op: str, x: Shape, lo: int, hi: int) -> None:
    if not lo <= len(x) <= hi:
        raise RuleArgumentError(
            f"'x' has rank {len(x)} but {op} takes rank {lo}..{hi} (N, C and up to "
            f"{hi - 2} spatial dims); reshape x"
        )


def _check_vector(name: str, s: Shape | None, size: int, what: str) -> None:
    if s is None:
        return
    if len(s) != 1:
        raise RuleArgumentError(
            f"the ndim of {name!r} should be 1, but got {len(s)} (shape {list(s)}); give a 1-D "
            f"{name} of size {size} ({what}), or None if there is no {name}"
        )
    if s[0] != size:
        raise RuleArgumentError(
            f"{name!r} has size {s[0]} but must have {size} entries ({what})"
        )


# ---- batch_norm(x, mean, variance, scale, bias) -> out, mean_out, variance_out, saved_mean,
#      saved_variance, reserve_space ---------------------------------------------------------------
def describe_batch_norm(x: Shape, mean: Shape, variance: Shape, scale: Shape, bias: Shape, *,
                        data_format: str = "NCHW", **_: object) -> Description:
    _check_x("batch_norm", x, 2, 5)
    ch = channel_axis(len(x), data_format)
    for name, s in (("mean", mean), ("variance", variance), ("scale", scale), ("bias", bias)):
        _check_vector(name, s, x[ch], f"one per channel of x dim {ch}")
    xl = letters(len(x))
    c = xl[ch]
    extra = letters(2, xl)
    param, reserve = extra[0], extra[1]
    return Description(
        (xl, c, c, param, param), (xl, c, c, c, c, reserve),
        whole=frozenset(xl.replace(c, "") + param + reserve), merge=(0,), pending=None,
    )


register_described(
    "batch_norm", describe_batch_norm,
    inputs=[T("x"), T("mean"), T("variance"), T("scale"), T("bias")],
    outputs=[T("out"), T("mean_out"), T("variance_out"), T("saved_mean"), T("saved_variance"),
             T("reserve_space")],
    attrs=[A("is_test", "bool", False), A("momentum", "float", 0.9),
           A("epsilon", "float", 1e-5), A("data_format", "str", "NCHW"),
           A("use_global_stats", "bool", False), A("trainable_statistics", "bool", False)],
    doc="BatchNormInferSpmd: only the channel dim keeps its shard (statistics per channel); "
    "scale, bias and reserve_space replicated.",
)


# ---- group_norm(x, scale?, bias?) -> y, mean, variance ------------------------------------------
def describe_group_norm(x: Shape, scale: Shape | None, bias: Shape | None, *,
                        data_format: str = "NCHW", **_: object) -> Description:
    _check_x("group_norm", x, 2, 5)
    ch = channel_axis(len(x), data_format)
    for name, s in (("scale", scale), ("bias", bias)):
        _check_vector(name, s, x[ch], f"one per channel of x dim {ch}")
    xl = letters(len(x))
    extra = letters(2, xl)
    param, group = extra[0], extra[1]
    n = xl[0]
    return Description(
        (xl, param, param), (xl, n + group, n + group),
        whole=frozenset(xl[1:] + param + group), merge=(0,), pending=None,
    )


register_described(
    "group_norm", describe_group_norm, inputs=[T("x"), Opt("scale"), Opt("bias")],
    outputs=[T("y"), T("mean"), T("variance")],
    attrs=[A("epsilon", "float", 1e-5), A("groups", "int", -1), A("data_format", "str", "NCHW")],
    doc="GroupNormInferSpmd: only the batch dim keeps its shard; mean/variance [N, groups].",
)


# ---- instance_norm(x, scale?, bias?) -> y, saved_mean, saved_variance --------------------------
def describe_instance_norm(x: Shape, scale: Shape | None, bias: Shape | None,
                           **_: object) -> Description:
    _check_x("instance_norm", x, 2, 5)
    for name, s in (("scale", scale), ("bias", bias)):
        _check_vector(name, s, x[1], "one per channel of x dim 1")
    xl = letters(len(x))
    param = letters(1, xl)
    return Description(
        (xl, param, param), (xl, xl[:2], xl[:2]),
        whole=frozenset(xl[2:] + param), merge=(0,), pending=None,
    )


register_described(
    "instance_norm", describe_instance_norm, inputs=[T("x"), Opt("scale"), Opt("bias")],
    outputs=[T("y"), T("saved_mean"), T("saved_variance")], attrs=[A("epsilon", "float", 1e-5)],
    doc="InstanceNormInferSpmd: N and C keep their shards, the spatial dims are whole; "
    "saved statistics [N, C].",
)


def _nc_mapping(x: TensorSpec) -> MultiDims:
    m = x.attr.multi_dims_mapping
    return m[:2] + ((),) * (len(m) - 2)


def instance_norm_grad(
    x: TensorSpec, scale: TensorSpec | None, bias: TensorSpec | None, saved_mean: TensorSpec,
    saved_variance: TensorSpec, y_grad: TensorSpec, epsilon: float,
) -> SpmdInfo:
    """InstanceNormGradInferSpmd: x decides N and C; x_grad follows x; scale_grad and bias_grad
    (per channel, summed over N and the spatial dims) are pending sums over N's and C's mesh dims:
    each rank adds its samples' part, zero outside its channels."""
    describe_instance_norm(x.shape, None if scale is None or not scale.shape else scale.shape,
                           None if bias is None or not bias.shape else bias.shape)
    for name, t in (("saved_mean", saved_mean), ("saved_variance", saved_variance)):
        if t.shape != x.shape[:2]:
            raise RuleArgumentError(
                f"{name!r} has shape {list(t.shape)} but must be x's [N, C] {list(x.shape[:2])}")
    if y_grad.shape != x.shape:
        raise RuleArgumentError(
            f"'y_grad' has shape {list(y_grad.shape)} but 'x' has {list(x.shape)}")
    xm = _nc_mapping(x)
    nc = xm[:2]
    summed = tuple(sorted((d, "sum") for dims in nc for d in dims))

    def vector(t: TensorSpec | None, partial: tuple[tuple[int, str], ...] = ()) -> object:
        return None if t is None else attr(t, ((),) * t.ndim, partial)

    ins = (attr(x, xm), vector(scale), vector(bias), attr(saved_mean, nc),
           attr(saved_variance, nc), attr(y_grad, xm))
    param = scale if scale is not None else bias
    outs = (attr(x, xm),
            None if scale is None else vector(scale, summed),
            None if param is None else vector(param, summed))
    return SpmdInfo(ins, outs)  # type: ignore[arg-type]


register_rule(
    "instance_norm_grad", forward=instance_norm_grad,
    inputs=[T("x"), Opt("scale"), Opt("bias"), T("saved_mean"), T("saved_variance"), T("y_grad")],
    outputs=[T("x_grad"), T("scale_grad"), T("bias_grad")], attrs=[A("epsilon", "float", 1e-5)],
    doc="InstanceNormGradInferSpmd: N and C from x; scale_grad and bias_grad pending sums over "
    "the mesh dims of N and C.",
)
