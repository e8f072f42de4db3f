"""Vector-Jacobian product of one_hot: integer ids take no cotangent."""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.execution.local import LocalContext, LocalValue, register_vjp


@register_vjp("one_hot")
def one_hot_vjp(ctx: LocalContext, ins: Sequence[LocalValue], outs: Sequence[LocalValue],
                cts: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    return (None,)
