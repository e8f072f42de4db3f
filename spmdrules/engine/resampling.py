"""Resampling (nearest and linear interpolation) as Paddle's interp attributes give it.

Each output position along a spatial dim reads one input position (nearest) or two neighbouring
ones with a weight (linear), at the source index Paddle's interpolate kernels compute: the ratio
``in / out`` (or ``1 / scale`` when a scale is given; ``(in - 1) / (out - 1)`` with
``align_corners``), 0 for an output of length 1. Linear with ``align_mode`` 0 and not
``align_corners`` is half-pixel (``ratio (j + 0.5) - 0.5``, clamped at 0: torch's
``align_corners=False``); otherwise the source is ``ratio j``. Nearest takes ``int(ratio j)``
(rounded half up with ``align_corners``).

The source indices are monotone in the output position, so the input a block of outputs reads
is an interval: :meth:`Resampling.input_span` is the same contract as
:meth:`~spmdrules.runtime.windows.Window.input_span`, and the window machinery
(:func:`~spmdrules.engine.windows.block_halos`, the lowering's halos) serves both.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from spmdrules.core.errors import RuleArgumentError

Span = tuple[int, int]
Array = np.ndarray[Any, Any]

#: interp op -> its interp_method
METHODS: Final = {"nearest_interp": "nearest", "bilinear_interp": "bilinear"}
#: interp op -> the input ranks it takes
RANKS: Final = {"nearest_interp": (3, 4, 5), "bilinear_interp": (4,)}
#: the output-size attribute of each spatial dim, by the number of spatial dims
SIZE_ATTRS: Final = {1: ("out_w",), 2: ("out_h", "out_w"), 3: ("out_d", "out_h", "out_w")}
_FORMATS: Final = {3: ("NCW", "NWC"), 4: ("NCHW", "NHWC"), 5: ("NCDHW", "NDHWC")}


@dataclass(frozen=True, slots=True)
class Resampling:
    """One spatial dim of an interpolation: ``n`` inputs resampled to ``m`` outputs."""

    n: int
    m: int
    ratio: float  # float32, as Paddle computes it
    linear: bool
    half_pixel: bool  # linear: ratio (j + 0.5) - 0.5
    round_half: bool  # nearest with align_corners: int(ratio j + 0.5)

    def taps(self, outputs: range) -> tuple[Array, Array, Array]:
        """Per output in ``outputs``: the two input positions it reads and the second's weight
        (nearest: the same position twice, weight 0)."""
        j = np.arange(outputs.start, outputs.stop, dtype=np.int64)
        r = np.float32(self.ratio)
        if not self.linear:
            at = (r * j.astype(np.float32)).astype(np.float64) + (0.5 if self.round_half else 0)
            i0 = np.minimum(at.astype(np.int64), self.n - 1)
            return i0, i0, np.zeros(len(j), dtype=np.float64)
        if self.half_pixel:
            src = np.maximum(float(r) * (j + 0.5) - 0.5, 0.0)
        else:
            src = (r * j.astype(np.float32)).astype(np.float64)
        i0 = np.minimum(np.trunc(src).astype(np.int64), self.n - 1)
        i1 = np.minimum(i0 + 1, self.n - 1)
        lam = src.astype(np.float32).astype(np.float64) - i0
        return i0, i1, lam

    def input_span(self, outputs: Span, n: int) -> Span:
        """Input positions in ``[0, n)`` that outputs ``[j0, j1)`` read (empty as (0, 0))."""
        j0, j1 = outputs
        if j1 <= j0:
            return (0, 0)
        first, _, _ = self.taps(range(j0, j0 + 1))
        _, last, _ = self.taps(range(j1 - 1, j1))
        return int(first[0]), min(int(last[0]) + 1, n)


def spatial_of(op: str, rank: int, data_format: str) -> list[int]:
    """The spatial dims of an interp op's input, checked against the op and the layout."""
    if rank not in RANKS[op]:
        raise RuleArgumentError(f"{op}: 'x' has rank {rank}; {op} takes rank "
                                f"{' or '.join(map(str, RANKS[op]))}")
    if data_format not in _FORMATS[rank]:
        raise RuleArgumentError(f"{op}: data_format {data_format!r} is not one of "
                                f"{list(_FORMATS[rank])} for an input of rank {rank}")
    nsp = rank - 2
    return list(range(1, nsp + 1)) if data_format.endswith("C") else list(range(2, nsp + 2))


def _scales(op: str, attrs: Mapping[str, Any], nsp: int) -> tuple[float, ...]:
    s = tuple(float(v) for v in attrs.get("scale", ()) or ())
    if not s:
        return ()
    if len(s) == 1:
        s = s * nsp
    if len(s) != nsp or not all(math.isfinite(v) and v > 0 for v in s):
        raise RuleArgumentError(f"{op}: scale {list(s)} must be {nsp} finite positive factors (or one "
                                "for every spatial dim); or give the output size")
    return s


def out_lengths(op: str, in_lengths: Sequence[int], attrs: Mapping[str, Any]) -> tuple[int, ...]:
    """The output's spatial lengths: ``int(in * scale)`` when ``scale`` is given (Paddle's
    precedence), else the ``out_d``/``out_h``/``out_w`` attributes."""
    nsp = len(in_lengths)
    scales = _scales(op, attrs, nsp)
    if scales:
        outs = tuple(int(np.float32(n) * np.float32(s)) for n, s in zip(in_lengths, scales,
                                                                         strict=True))
    else:
        outs = tuple(int(attrs.get(a, 0) or 0) for a in SIZE_ATTRS[nsp])
    if min(outs) < 1:
        given = f"scale {list(scales)}" if scales else \
            ", ".join(f"{a}={attrs.get(a, 0)}" for a in SIZE_ATTRS[nsp])
        raise RuleArgumentError(f"{op}: the output's spatial lengths {list(outs)} (from {given} "
                                f"over {list(in_lengths)}) must be >= 1; give positive sizes")
    return outs


def resampling(op: str, in_lengths: Sequence[int], attrs: Mapping[str, Any]
               ) -> tuple[Resampling, ...]:
    """One :class:`Resampling` per spatial dim of ``op`` over ``in_lengths``."""
    method = str(attrs.get("interp_method", METHODS[op]))
    if method != METHODS[op]:
        raise RuleArgumentError(f"{op}: interp_method {method!r} is not {METHODS[op]!r}; use the "
                                "interp op of that method")
    mode = int(attrs.get("align_mode", 1))
    if mode not in (0, 1):
        raise RuleArgumentError(f"{op}: align_mode {mode} is not 0 (half-pixel) or 1")
    corners = bool(attrs.get("align_corners", True))
    scales = _scales(op, attrs, len(in_lengths))
    outs = out_lengths(op, in_lengths, attrs)
    linear = method == "bilinear"
    out = []
    for i, (n, m) in enumerate(zip(in_lengths, outs, strict=True)):
        ratio = np.float32(0)
        if m > 1:
            if corners:
                ratio = np.float32(n - 1) / np.float32(m - 1)
            elif scales:
                ratio = np.float32(1.0 / scales[i])
            else:
                ratio = np.float32(n) / np.float32(m)
        out.append(Resampling(int(n), int(m), float(ratio), linear,
                              linear and mode == 0 and not corners, not linear and corners))
    return tuple(out)


__all__ = ["METHODS", "RANKS", "Resampling", "out_lengths", "resampling", "spatial_of"]
