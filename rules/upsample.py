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

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.attributes import AttrParam
from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.policy import Policy
from spmdrules.engine.registry import A, T
from spmdrules.engine.resampling import METHODS, resampling, spatial_of
from spmdrules.engine.windows import Windowed

Shape = tuple[int, ...]

UPSAMPLE_OPS: Final = tuple(METHODS)


def interpolation(x: Shape, *values: Any, op: str) -> Description:
    """``x -> out`` letter for letter, the spatial letters read through the source positions."""
    attrs = dict(zip(_NAMES, values, strict=True))
    sp = spatial_of(op, len(x), str(attrs["data_format"]))
    lengths = tuple(x[d] for d in sp)
    taps = resampling(op, lengths, attrs)
    ls = letters(len(x))
    windows = Windowed(op, "x", "".join(ls[d] for d in sp), tuple(sp), lengths,
                       tuple(t.m for t in taps), tuple(taps))
    return Description((ls,), (ls,), policy=Policy(windows=windows))


def _check_out(op: str, x: Shape, out: Shape, values: Sequence[Any]) -> None:
    attrs = dict(zip(_NAMES, values, strict=True))
    sp = spatial_of(op, len(x), str(attrs["data_format"]))
    if len(out) != len(x):
        raise RuleArgumentError(f"{op}: 'out' has rank {len(out)} but 'x' has {len(x)}")
    lengths = [x[d] for d in sp]
    outs = [t.m for t in resampling(op, lengths, attrs)]
    if [out[d] for d in sp] != outs:
        raise RuleArgumentError(f"{op}: 'out' has spatial lengths {[out[d] for d in sp]} but "
                                f"the attributes over 'x' {lengths} give {outs}")


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
    def describe(x: Shape, **values: Any) -> Description:
        return interpolation(x, *(values[a] for a in _NAMES), op=op)

    def check_out(x: Shape, out: Shape, *values: Any) -> None:
        _check_out(op, x, out, values)

    register_described(
        op, describe, inputs=[T("x")], outputs=[T("out")], attrs=_attrs(op),
        check_reverse=check_out,
        doc=f"{op}: batch, channels and spatial dims keep their shards (a spatial split reads a "
        "halo of its neighbours' rows where the source positions need it).",
    )


for _op in UPSAMPLE_OPS:
    _register(_op)
