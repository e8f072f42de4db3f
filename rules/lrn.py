"""lrn: local response normalisation across channels (AlexNet's, ONNX's LRN, Paddle's ``lrn``).

``out = x * (k + alpha * sum of x^2 over a window of n channels)^-beta``; the window of channel
``c`` is ``[c - (n-1)//2, c + n//2]``. Described as data: ``x`` and ``out`` share their letters,
the channel letter is whole (each channel reads its neighbours), every other dim (batch, spatial)
keeps its shard since the window never crosses them. A pending sum is resharded first (the
square does not distribute over it). Paddle has no SPMD rule for lrn: this is our own.
"""

from __future__ import annotations

from spmdrules.engine.described import ranks, register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.registry import A, T
from spmdrules.engine.rulekit import normalise_axis
from spmdrules.engine.windows import channel_axis


def _lrn(x: tuple[int, ...], *, data_format: str = "NCHW", **_: object) -> Description:
    xl = letters(len(x))
    c = normalise_axis("lrn", "x", channel_axis(data_format, len(x)), len(x))
    return Description((xl,), (xl,), whole=frozenset(xl[c]), pending=None)


register_described(
    "lrn", _lrn, inputs=[T("x")], outputs=[T("out")],
    attrs=[A("n", "int", 5), A("k", "float", 2.0), A("alpha", "float", 1e-4),
           A("beta", "float", 0.75), A("data_format", "str", "NCHW")], key=ranks,
    doc="lrn (no Paddle rule): the channel axis replicated, batch and spatial dims kept.")
