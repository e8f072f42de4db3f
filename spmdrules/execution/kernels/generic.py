"""The local kernel of the generic rules (default_data_parallel, default_, replicated).

The generic rules describe an op they know nothing about: the data-parallel rule claims only that
every tensor may be cut along dim 0 (the batch) alike, the replicated one that everything is
whole. The one op both claims can be checked on is the row-wise identity, ``outs[i] = ins[i]``
for tensors of equal global shape, and that is what their kernel computes; an ``outs[i]`` without
an ``ins[i]`` of its shape cannot be executed (UnsupportedError), since the op is opaque.
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.core.errors import RuleArgumentError, UnsupportedError
from spmdrules.execution.local import (
    LocalContext,
    LocalValue,
    arrays,
    register_kernel,
    variadic_output,
)


# ---- the generic rules: the row-wise identity -----------------------------------------------------
def _generic_outputs(ctx: LocalContext) -> list[tuple[int, ...]]:
    """The global shapes of ``outs``: the op's list output, or the rule's second list argument."""
    if ctx.output_shapes:
        return [s for s, _ in variadic_output(ctx)]
    if len(ctx.input_shapes) > 1 and ctx.input_shapes[1] is not None:
        return [tuple(s) for s in ctx.input_shapes[1]]
    raise RuleArgumentError(f"{ctx.op}: the context names no 'outs'; declare the op's results")


@register_kernel("default_data_parallel", "default_", "replicated")
def generic_identity(ctx: LocalContext, blocks: Sequence[LocalValue]) -> tuple[LocalValue, ...]:
    ins = arrays(ctx, blocks, 0, "ins")
    in_shapes = [tuple(s) for s in ctx.input_shapes[0]]
    outs = []
    for i, shape in enumerate(_generic_outputs(ctx)):
        if i >= len(ins) or in_shapes[i] != shape:
            have = f"no ins[{i}]" if i >= len(ins) else f"ins[{i}] has shape {list(in_shapes[i])}"
            raise UnsupportedError(
                f"{ctx.op}: outs[{i}] of shape {list(shape)} cannot be executed: {have}. The "
                "generic rules describe an opaque op; only the row-wise identity outs[i] = "
                "ins[i] (equal shapes) has a local kernel. Give the op its own rule and kernel"
            )
        outs.append(ins[i].copy())
    return (outs,)
