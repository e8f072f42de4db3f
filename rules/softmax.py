"""softmax / log_softmax: ``a..k..->a..k..`` normalised along one axis ``k``.

The normalised axis is never sharded (every output element needs its whole row); every other dim
keeps its input sharding when it divides evenly, as Paddle does on the output. Partial inputs are
resharded to replicated (the exponential does not distribute over a pending sum).
"""

from __future__ import annotations

from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.described import ranks, register_described
from spmdrules.engine.description import Description, letters
from spmdrules.engine.registry import A, T
from spmdrules.engine.rulekit import normalise_axis

SOFTMAX_OPS = ("softmax", "log_softmax")


def softmax(x: tuple[int, ...], axis: int) -> Description:
    """``a..k..->a..k..`` with the normalised axis ``k`` whole."""
    ls = letters(len(x))
    # A 0-d tensor is its own single row: axis -1 or 0 as for a vector.
    ax = normalise_axis("softmax", "x", axis, len(x) or 1)
    return Description((ls,), (ls,), whole=frozenset(ls[ax:ax + 1]))


def _check_out(x: tuple[int, ...], out: tuple[int, ...], *_: object) -> None:
    if x != out:
        raise RuleArgumentError(
            f"'x' has shape {list(x)} but 'out' has {list(out)}; softmax keeps the shape"
        )


for _name in SOFTMAX_OPS:
    register_described(
        _name, softmax, inputs=[T("x")], outputs=[T("out")], attrs=[A("axis", "int", -1)],
        key=ranks, check_reverse=_check_out,
        doc="SoftmaxInferSpmd: the normalised axis is replicated; uneven dims are replicated.",
    )
