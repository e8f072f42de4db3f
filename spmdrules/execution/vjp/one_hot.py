"""Vector-Jacobian product of one_hot: integer ids take no cotangent."""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.execution.local import Block, LocalContext, register_vjp


@register_vjp("one_hot")
def one_hot_vjp(ctx: LocalContext, ins: Sequence[Block], outs: Sequence[Block],
                cts: Sequence[Block]) -> tuple[Block, ...]:
    return (None,)
