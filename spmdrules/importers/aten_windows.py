"""ATen's CNN layers onto registered ops: convolutions (plain, grouped, dilated, transposed)
onto ``conv2d``/``conv3d``/``conv2d_transpose`` (rules/conv.py), pools onto ``pool2d``/``pool3d``
(rules/pool.py), batch norm as elementwise ops and reductions (``channel_maps``, shared with the
ONNX importer).

Registered into ``spmdrules.importers.aten.ATEN`` on import, as the converters of that module;
``spmdrules.importers.torch`` imports it. The importer's ``spatial_sharding`` is every
convolution's opt-in (docs/rules.md), as in the ONNX importer.

ATen pads each spatial dim by the same amount at both ends; the graph's ``paddings`` are
``[x1_begin, x1_end, x2_begin, ...]``. A pool's ``indices`` result (``max_pool2d_with_indices``)
is not mapped: reading it (``max_unpool2d``) is refused naming the node. A training batch norm
normalises by the whole batch's statistics, so on a split batch each statistic is a pending sum
of a [C] vector, all-reduced (synchronised batch norm); its running statistics are returned as
torch's functional program returns them (``Imported.updates``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spmdrules.graph.nodes import Tensor
from spmdrules.importers.aten import Ctx, _Unmapped, aten
from spmdrules.importers.channel_maps import (
    BatchStatistics,
    biased_conv,
    inference_batch_norm,
    running_update,
    training_batch_norm,
    unbiased,
)


def _per_dim(c: Ctx, name: str, v: Any, nsp: int) -> list[int]:
    """An ATen int list of one entry per spatial dim (one entry stands for every dim)."""
    vals = [int(e) for e in (v if isinstance(v, list | tuple) else [v])]
    if len(vals) == 1:
        vals = vals * nsp
    if len(vals) != nsp:
        raise c.fail(f"{name}={vals}: give one value, or one per spatial dim ({nsp})")
    return vals


def _both_ends(padding: Sequence[int]) -> list[int]:
    return [p for p in padding for _ in (0, 1)]


def _spatial(c: Ctx, x: Tensor, ranks: Sequence[int], what: str) -> int:
    if x.ndim not in ranks:
        kinds = " and ".join(f"{r - 2}-D (rank {r})" for r in ranks)
        raise c.fail(f"input rank {x.ndim}: only {kinds} {what} are registered; reshape the "
                     "input or use a registered rank")
    return x.ndim - 2


# ---- convolution ----------------------------------------------------------------------------------
@aten("convolution.default")
def _convolution(c: Ctx, a: dict[str, Any]) -> Tensor:
    return _conv(c, a, transposed=bool(a["transposed"]))


@aten("conv1d.default", "conv2d.default", "conv3d.default")
def _conv_training_ir(c: Ctx, a: dict[str, Any]) -> Tensor:
    """The training IR's (``decompose=False``) convolution, ``convolution`` untransposed."""
    return _conv(c, a, transposed=False)


@aten("conv_transpose1d.default", "conv_transpose2d.input")
def _conv_transpose_training_ir(c: Ctx, a: dict[str, Any]) -> Tensor:
    return _conv(c, a, transposed=True)


def _conv(c: Ctx, a: dict[str, Any], *, transposed: bool) -> Tensor:
    x: Tensor = a["input"]
    if x.ndim == 3:
        return _conv1d(c, a, transposed=transposed)
    w: Tensor = a["weight"]
    nsp = _spatial(c, x, (3, 4) if transposed else (3, 4, 5),
                   "transposed convolutions" if transposed else "convolutions")
    attrs: dict[str, Any] = {
        "strides": _per_dim(c, "stride", a["stride"], nsp),
        "paddings": _both_ends(_per_dim(c, "padding", a["padding"], nsp)),
        "dilations": _per_dim(c, "dilation", a["dilation"], nsp),
        "groups": int(a["groups"]),
        "spatial_sharding": c.spatial_sharding,
    }
    opad = _per_dim(c, "output_padding", a.get("output_padding", 0), nsp)
    if transposed:
        op = "conv2d_transpose"
        attrs["output_padding"] = opad
    else:
        if any(opad):
            raise c.fail(f"output_padding={opad} on a convolution that is not transposed")
        op = "conv2d" if nsp == 2 else "conv3d"
    return biased_conv(c, op, x, w, a["bias"], **attrs)


def _conv1d(c: Ctx, a: dict[str, Any], *, transposed: bool) -> Tensor:
    """A 1-D convolution [N, C, L] as the 2-D one of [N, C, 1, L]: a unit H dim before L (in the
    input and the weight) with stride, dilation and kernel 1 and no padding on it, so every
    output element is the same sum of the same products, and the unsqueeze and squeeze keep the
    splits of N, C and L."""
    x, w = a["input"], a["weight"]
    if w.ndim != 3:
        raise c.fail(f"weight of rank {w.ndim} for a 1-D input: a 1-D convolution's weight is "
                     "[out, in / groups, kernel] (or [in, out / groups, kernel] transposed)")
    unit = {"stride": 1, "padding": 0, "dilation": 1, "output_padding": 0}
    two_d = {**a, "input": c.call("unsqueeze", x, axis=[2], part="input_2d"),
             "weight": c.call("unsqueeze", w, axis=[2], part="weight_2d"),
             **{k: [unit[k], *_per_dim(c, k, a[k], 1)] for k in unit if k in a}}
    y = _conv(c, two_d, transposed=transposed)
    return c.call("squeeze", y, axis=[2], part="1d")


# ---- pools --------------------------------------------------------------------------------------
def _pool(c: Ctx, a: dict[str, Any], kind: str) -> Tensor:
    x: Tensor = a["self"]
    nsp = _spatial(c, x, (4, 5), "pools")
    kernel = _per_dim(c, "kernel_size", a["kernel_size"], nsp)
    stride = _per_dim(c, "stride", a["stride"], nsp) if a["stride"] else kernel
    if any(d != 1 for d in _per_dim(c, "dilation", a.get("dilation", 1), nsp)):
        raise c.fail(f"dilation={a['dilation']}: the registered pools have no dilation")
    if a.get("divisor_override") is not None:
        raise c.fail(f"divisor_override={a['divisor_override']}: the registered avg pool "
                     "divides by the window's size")
    return c.call("pool2d" if nsp == 2 else "pool3d", x, kernel_size=kernel, strides=stride,
                  paddings=_both_ends(_per_dim(c, "padding", a["padding"], nsp)),
                  ceil_mode=bool(a["ceil_mode"]), pooling_type=kind,
                  exclusive=not bool(a.get("count_include_pad", True)))


@aten("max_pool2d_with_indices.default", "max_pool3d_with_indices.default")
def _max_pool_with_indices(c: Ctx, a: dict[str, Any]) -> tuple[Any, ...]:
    return (_pool(c, a, "max"), _Unmapped(c, "indices"))


@aten("max_pool2d.default", "max_pool3d.default")
def _max_pool(c: Ctx, a: dict[str, Any]) -> Tensor:
    return _pool(c, a, "max")


@aten("avg_pool2d.default", "avg_pool3d.default")
def _avg_pool(c: Ctx, a: dict[str, Any]) -> Tensor:
    return _pool(c, a, "avg")


def _adaptive(c: Ctx, a: dict[str, Any], kind: str) -> Tensor:
    """Adaptive pooling: bin ``i`` of ``n`` over a dim of length ``L`` spans ``floor(i L / n)``
    to ``ceil((i + 1) L / n)``, in torch and in the registered pool alike."""
    x: Tensor = a["self"]
    nsp = _spatial(c, x, (4, 5), "pools")
    size = _per_dim(c, "output_size", a["output_size"], nsp)
    return c.call("pool2d" if nsp == 2 else "pool3d", x, kernel_size=size, adaptive=True,
                  pooling_type=kind)


@aten("_adaptive_avg_pool2d.default", "adaptive_avg_pool2d.default",
      "_adaptive_avg_pool3d.default", "adaptive_avg_pool3d.default")
def _adaptive_avg(c: Ctx, a: dict[str, Any]) -> Tensor:
    return _adaptive(c, a, "avg")


@aten("adaptive_max_pool2d.default", "adaptive_max_pool3d.default")
def _adaptive_max(c: Ctx, a: dict[str, Any]) -> tuple[Any, ...]:
    return (_adaptive(c, a, "max"), _Unmapped(c, "indices"))


# ---- batch norm ---------------------------------------------------------------------------------
def _checked_x(c: Ctx, a: dict[str, Any]) -> Tensor:
    x: Tensor = a["input"]
    if x.ndim < 2:
        raise c.fail(f"input rank {x.ndim}: batch norm needs [N, C, ...]")
    return x


def _training(c: Ctx, a: dict[str, Any]) -> BatchStatistics:
    return training_batch_norm(c, _checked_x(c, a), a["weight"], a["bias"], float(a["eps"]))


def _inference(c: Ctx, a: dict[str, Any]) -> Tensor:
    return inference_batch_norm(c, _checked_x(c, a), a["weight"], a["bias"], a["running_mean"],
                                a["running_var"], float(a["eps"]))


@aten("_native_batch_norm_legit_no_training.default")
def _batch_norm_inference(c: Ctx, a: dict[str, Any]) -> tuple[Any, ...]:
    return (_inference(c, a), _Unmapped(c, "save_mean"), _Unmapped(c, "save_rstd"))


@aten("_native_batch_norm_legit_functional.default")
def _batch_norm_functional(c: Ctx, a: dict[str, Any]) -> tuple[Any, ...]:
    """Results (out, save_mean, save_rstd, new running_mean, new running_var)."""
    rm: Tensor = a["running_mean"]
    rv: Tensor = a["running_var"]
    if not a["training"]:
        return (_inference(c, a), _Unmapped(c, "save_mean"), _Unmapped(c, "save_rstd"), rm, rv)
    s = _training(c, a)
    m = float(a["momentum"])
    return (s.out, s.mean, s.rstd, running_update(c, rm, s.mean, m, "running_mean"),
            running_update(c, rv, s.var, m, "running_var", unbiased(a["input"])))


@aten("_native_batch_norm_legit.no_stats")
def _batch_norm_no_stats(c: Ctx, a: dict[str, Any]) -> tuple[Any, ...]:
    """A batch norm without running statistics (``track_running_stats=False``): batch
    statistics in eval mode too, as torch normalises."""
    s = _training(c, a)
    return (s.out, s.mean, s.rstd)


@aten("batch_norm.default")
def _batch_norm_training_ir(c: Ctx, a: dict[str, Any]) -> Tensor:
    """The training IR's (``decompose=False``) batch norm, which writes the running statistics
    in place when training: refused there (the decomposed program returns them)."""
    if a["running_mean"] is None or a["running_var"] is None:
        return _training(c, a).out
    if a["training"]:
        raise c.fail("training mode writes the running statistics in place; import the "
                     "decomposed program (decompose=True, the default), which returns them")
    return _inference(c, a)


__all__: list[str] = []
