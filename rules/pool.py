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

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.described import register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.policy import Policy
from spmdrules.engine.registry import A, T
from spmdrules.engine.windows import Windowed, geometry

Shape = tuple[int, ...]

POOL_OPS: Final = ("pool2d", "pool3d")
_FORMATS: Final = {2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}


def spatial_dims(op: str, x: Shape, data_format: str) -> list[int]:
    nsp = 3 if op == "pool3d" else 2
    if len(x) != nsp + 2:
        raise RuleArgumentError(
            f"{op}: 'x' has rank {len(x)} but must have rank {nsp + 2} "
            f"({' or '.join(_FORMATS[nsp])})"
        )
    if data_format not in _FORMATS[nsp]:
        raise RuleArgumentError(f"{op}: data_format {data_format!r} is not one of "
                                f"{list(_FORMATS[nsp])}")
    return list(range(1, nsp + 1)) if data_format.endswith("C") else list(range(2, nsp + 2))


def reduces_whole(attrs: dict[str, Any]) -> bool:
    """Adaptive and global pooling: bins over the whole dim, not sliding windows."""
    return bool(attrs["global_pooling"]) or bool(attrs["adaptive"])


def _windows(op: str, x: Shape, sp: Sequence[int], ls: str, attrs: dict[str, Any]) -> Windowed:
    """The pool's windows over x's spatial letters; the attributes' errors refuse a split only."""
    lengths = tuple(x[d] for d in sp)
    spatial = "".join(ls[d] for d in sp)
    try:
        if attrs["pooling_type"] not in ("max", "avg"):
            raise RuleArgumentError(f"{op}: pooling_type {attrs['pooling_type']!r} is not 'max' "
                                    "or 'avg'")
        kernel = list(attrs["kernel_size"]) or [1]
        if len(kernel) == 1:
            kernel = kernel * len(sp)
        if len(kernel) != len(sp):
            raise RuleArgumentError(f"{op}: kernel_size {kernel} needs {len(sp)} entries")
        g = geometry(op, lengths, kernel, attrs, ceil_mode=bool(attrs["ceil_mode"]))
    except RuleArgumentError as e:
        return Windowed(op, "x", spatial, tuple(sp), lengths, lengths, refusal=str(e))
    return Windowed(op, "x", spatial, tuple(sp), lengths, g.out_lengths, g.windows)


def pool(x: Shape, *values: Any, op: str = "pool2d") -> Description:
    """``x nc<S> -> out nc<S>``, the spatial letters read through the windows; adaptive and
    global pooling: ``out`` has spatial letters of its own, so x's split ones are pending (max
    for max pooling, sum for average pooling) and out's are kept in reverse."""
    attrs = dict(zip(_NAMES, values, strict=True))
    sp = spatial_dims(op, x, str(attrs["data_format"]))
    ls = letters(len(x))
    if reduces_whole(attrs):
        fresh = letters(len(x) + len(sp))[len(x):]
        out = list(ls)
        for d, ch in zip(sp, fresh, strict=True):
            out[d] = ch
        rt = "max" if attrs["pooling_type"] == "max" else "sum"
        return Description((ls,), ("".join(out),), pending=rt)
    return Description((ls,), (ls,), policy=Policy(windows=_windows(op, x, sp, ls, attrs)))


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

    def describe(x: Shape, **values: Any) -> Description:
        return pool(x, *(values[a] for a in _NAMES), op=op)

    def same_rank(x: Shape, out: Shape, *values: Any) -> None:
        if len(out) != len(x):
            raise RuleArgumentError(f"{op}: 'out' has rank {len(out)} but 'x' has {len(x)}")

    register_described(
        op, describe, inputs=[T("x")], outputs=[T("out")], attrs=attrs, check_reverse=same_rank,
        doc=f"{op}: batch, channels and spatial dims keep their shards (a halo for windows; "
        "adaptive/global pooling is pending over a sharded spatial dim).",
    )


for _op in POOL_OPS:
    _register(_op)
