"""Pooling: pool2d and pool3d (Paddle's op attributes; Paddle has no SPMD rule for them).

``x nc<S> -> out nc<S>`` (channels last: ``n<S>c``). Batch and channels keep their shards. The
spatial dims keep theirs too, by default: a windowed pool reads a halo from its neighbouring
blocks, which the lowering exchanges (one-sided where the windows are, seed 003); the rule
refuses, with the dim and the fix, a layout whose windows reach past the neighbouring block.
Adaptive and global pooling over a sharded spatial dim reduce across it: each block pools its own
part of every bin and the output is pending over those mesh dims (max for max pooling, sum for
average pooling, whose block sums are divided by the whole bin's size). Partial inputs are
resharded (max pooling does not distribute over a pending sum).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from spmdrules.core.attr import MultiDims, PartialItems
from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine.registry import A, T, register_rule
from spmdrules.engine.rulekit import attr, shard_product
from spmdrules.engine.windows import block_halos, collapsed, geometry

POOL_OPS: Final = ("pool2d", "pool3d")
_FORMATS: Final = {2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}


def spatial_dims(op: str, x: TensorSpec, data_format: str) -> list[int]:
    nsp = 3 if op == "pool3d" else 2
    if x.ndim != nsp + 2:
        raise RuleArgumentError(
            f"{op}: 'x' has rank {x.ndim} but must have rank {nsp + 2} "
            f"({' or '.join(_FORMATS[nsp])})"
        )
    if data_format not in _FORMATS[nsp]:
        raise RuleArgumentError(f"{op}: data_format {data_format!r} is not one of "
                                f"{list(_FORMATS[nsp])}")
    return list(range(1, nsp + 1)) if data_format.endswith("C") else list(range(2, nsp + 2))


def reduces_whole(attrs: dict[str, Any]) -> bool:
    """Adaptive and global pooling: bins over the whole dim, not sliding windows."""
    return bool(attrs["global_pooling"]) or bool(attrs["adaptive"])


def _windows(op: str, name: str, t: TensorSpec, sp: Sequence[int], m: MultiDims,
             attrs: dict[str, Any], out_lengths: Sequence[int] | None = None) -> MultiDims:
    """``m`` as the pool reads it: a spatial split whose output (``out_lengths``, else the
    windows' over ``t``) is shorter than its pieces ends here, whole (``windows.collapsed``);
    the others keep theirs, refused where a window would reach past the neighbouring block."""
    if not any(m[d] for d in sp):
        return m
    if attrs["pooling_type"] not in ("max", "avg"):
        raise RuleArgumentError(f"{op}: pooling_type {attrs['pooling_type']!r} is not 'max' or "
                                "'avg'")
    lengths = [t.shape[d] for d in sp]
    kernel = list(attrs["kernel_size"]) or [1]
    if len(kernel) == 1:
        kernel = kernel * len(sp)
    if len(kernel) != len(sp):
        raise RuleArgumentError(f"{op}: kernel_size {kernel} needs {len(sp)} entries")
    g = geometry(op, lengths, kernel, attrs, ceil_mode=bool(attrs["ceil_mode"]))
    shape = t.attr.mesh.shape
    ends = {sp[i] for i in collapsed(shape, m, sp, g.out_lengths if out_lengths is None
                                     else out_lengths)}
    for i, d in enumerate(sp):
        if m[d] and d not in ends:
            block_halos(op, name, d, lengths[i], g.out_lengths[i], g.windows[i],
                        shard_product(shape, m[d]))
    return tuple(() if d in ends else dims for d, dims in enumerate(m))


def pool_forward(x: TensorSpec, *values: Any, op: str = "pool2d") -> SpmdInfo:
    attrs = dict(zip(_NAMES, values, strict=True))
    sp = spatial_dims(op, x, str(attrs["data_format"]))
    m = x.attr.multi_dims_mapping
    if reduces_whole(attrs):
        rt = "max" if attrs["pooling_type"] == "max" else "sum"
        partial: PartialItems = tuple(sorted((d, rt) for i in sp for d in m[i]))
        out_m = tuple(() if i in sp else dims for i, dims in enumerate(m))
        return SpmdInfo((attr(x, m),), (attr(x, out_m, partial),))
    m = _windows(op, "x", x, sp, m, attrs)
    return SpmdInfo((attr(x, m),), (attr(x, m),))


def pool_reverse(x: TensorSpec, out: TensorSpec, *values: Any, op: str = "pool2d") -> SpmdInfo:
    attrs = dict(zip(_NAMES, values, strict=True))
    sp = spatial_dims(op, x, str(attrs["data_format"]))
    if out.ndim != x.ndim:
        raise RuleArgumentError(f"{op}: 'out' has rank {out.ndim} but 'x' has {x.ndim}")
    m = out.attr.multi_dims_mapping
    if reduces_whole(attrs):
        # every output bin reads the whole dim: x's spatial dims whole, out's blocks kept
        xm = tuple(() if i in sp else dims for i, dims in enumerate(m))
        return SpmdInfo((attr(x, xm),), (attr(out, m),))
    m = _windows(op, "x", x, sp, m, attrs, [out.shape[d] for d in sp])
    return SpmdInfo((attr(x, m),), (attr(out, m),))


_ATTRS: Final = [
    A("kernel_size", "ints", ()), A("strides", "ints", (1,)), A("paddings", "ints", (0,)),
    A("ceil_mode", "bool", False), A("exclusive", "bool", True),
    A("data_format", "str", "NCHW"), A("pooling_type", "str", "max"),
    A("global_pooling", "bool", False), A("adaptive", "bool", False),
    A("padding_algorithm", "str", "EXPLICIT"),
]
_NAMES: Final = tuple(a.name for a in _ATTRS)


def _register(op: str) -> None:
    attrs = list(_ATTRS)
    if op == "pool3d":
        attrs[_NAMES.index("data_format")] = A("data_format", "str", "NCDHW")

    def fwd(x: TensorSpec, *values: Any) -> SpmdInfo:
        return pool_forward(x, *values, op=op)

    def rev(x: TensorSpec, out: TensorSpec, *values: Any) -> SpmdInfo:
        return pool_reverse(x, out, *values, op=op)

    register_rule(
        op, forward=fwd, reverse=rev, inputs=[T("x")], outputs=[T("out")], attrs=attrs,
        doc=f"{op}: batch, channels and spatial dims keep their shards (a halo for windows; "
        "adaptive/global pooling is pending over a sharded spatial dim).",
    )


for _op in POOL_OPS:
    _register(_op)
