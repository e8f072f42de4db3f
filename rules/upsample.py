"""Upsampling: nearest_interp and bilinear_interp (Paddle's op attributes; Paddle has no SPMD
rule for them, so its auto-parallel falls back to replicating the input).

``x nc<S> -> out nc<S>`` (channels last: ``n<S>c``). Batch and channels keep their shards. A
spatial dim keeps its shard too: each process computes the output block of its own block's
position, whose source positions (``engine.resampling``) lie within its input block and a halo
from the neighbouring blocks, which the lowering exchanges (nearest at an integer scale over even
blocks reads none; bilinear one row each side). The rule refuses, with the dim and the fix, a
layout whose output block reads past the neighbouring input block (a downsampling by more than
the block), and ends the split (the dim whole) where the output is shorter than its pieces
(``windows.collapsed``). Partial inputs are resharded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from spmdrules.core.attr import MultiDims
from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine.attributes import AttrParam
from spmdrules.engine.registry import A, T, register_rule
from spmdrules.engine.resampling import METHODS, resampling, spatial_of
from spmdrules.engine.rulekit import attr, shard_product
from spmdrules.engine.windows import block_halos, collapsed

UPSAMPLE_OPS: Final = tuple(METHODS)


def _kept(op: str, x: TensorSpec, sp: Sequence[int], m: MultiDims, attrs: dict[str, Any],
          out_lengths: Sequence[int] | None = None) -> MultiDims:
    """``m`` as the interpolation reads it: a spatial split whose output is shorter than its
    pieces ends here (whole); the others keep theirs, refused where an output block would read
    past the neighbouring input block."""
    lengths = [x.shape[d] for d in sp]
    taps = resampling(op, lengths, attrs)
    outs = [t.m for t in taps]
    if out_lengths is not None and list(out_lengths) != outs:
        raise RuleArgumentError(f"{op}: 'out' has spatial lengths {list(out_lengths)} but the "
                                f"attributes over 'x' {lengths} give {outs}")
    if not any(m[d] for d in sp):
        return m
    shape = x.attr.mesh.shape
    ends = {sp[i] for i in collapsed(shape, m, sp, outs)}
    for i, d in enumerate(sp):
        if m[d] and d not in ends:
            block_halos(op, "x", d, lengths[i], outs[i], taps[i], shard_product(shape, m[d]))
    return tuple(() if d in ends else dims for d, dims in enumerate(m))


def upsample_forward(x: TensorSpec, *values: Any, op: str) -> SpmdInfo:
    attrs = dict(zip(_NAMES, values, strict=True))
    sp = spatial_of(op, x.ndim, str(attrs["data_format"]))
    m = _kept(op, x, sp, x.attr.multi_dims_mapping, attrs)
    return SpmdInfo((attr(x, m),), (attr(x, m),))


def upsample_reverse(x: TensorSpec, out: TensorSpec, *values: Any, op: str) -> SpmdInfo:
    attrs = dict(zip(_NAMES, values, strict=True))
    sp = spatial_of(op, x.ndim, str(attrs["data_format"]))
    if out.ndim != x.ndim:
        raise RuleArgumentError(f"{op}: 'out' has rank {out.ndim} but 'x' has {x.ndim}")
    m = _kept(op, x, sp, out.attr.multi_dims_mapping, attrs, [out.shape[d] for d in sp])
    return SpmdInfo((attr(x, m),), (attr(out, m),))


def _attrs(op: str) -> list[AttrParam]:
    # Paddle's ops.yaml: the output size (out_d/out_h/out_w) or scale, and the source-index
    # convention (align_corners, align_mode); the optional size tensors are not graph inputs
    return [
        A("data_format", "str", "NCHW"), A("out_d", "int", 0), A("out_h", "int", 0),
        A("out_w", "int", 0), A("scale", "floats", ()),
        A("interp_method", "str", METHODS[op]), A("align_corners", "bool", True),
        A("align_mode", "int", 1),
    ]


_NAMES: Final = tuple(a.name for a in _attrs("nearest_interp"))


def _register(op: str) -> None:
    def fwd(x: TensorSpec, *values: Any) -> SpmdInfo:
        return upsample_forward(x, *values, op=op)

    def rev(x: TensorSpec, out: TensorSpec, *values: Any) -> SpmdInfo:
        return upsample_reverse(x, out, *values, op=op)

    register_rule(
        op, forward=fwd, reverse=rev, inputs=[T("x")], outputs=[T("out")], attrs=_attrs(op),
        doc=f"{op}: batch, channels and spatial dims keep their shards (a spatial split reads a "
        "halo of its neighbours' rows where the source positions need it).",
    )


for _op in UPSAMPLE_OPS:
    _register(_op)
