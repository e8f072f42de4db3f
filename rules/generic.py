"""Generic rules for ops without a rule of their own: ``default_data_parallel`` (alias ``default_``)
and ``replicated``. Both take every input and every output as two lists.

Data parallel: every tensor's dim 0 is the batch axis ``b``; the batch shardings of one side merge
(a conflict is an error), and every tensor gets ``b`` sharded that way and every other dim
replicated. Forward merges the inputs, reverse the outputs. Replicated: everything replicated.
Partials are dropped in both (the op is opaque, so its inputs must be whole).

The answer is flat, as Paddle returns it: ``info.inputs`` holds one attribute per input tensor and
``info.outputs`` one per output tensor. A 0-d tensor has no batch axis and stays replicated.
"""

from __future__ import annotations

from collections.abc import Sequence

from spmdrules.core.attr import DistAttr, MultiDims
from spmdrules.core.errors import RuleArgumentError
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine import einsum
from spmdrules.engine.registry import Vec, register_rule
from spmdrules.engine.rulekit import attr


def _batch_dims(side: str, tensors: Sequence[TensorSpec]) -> tuple[int, ...]:
    """The mesh dims of the merged batch axis of ``tensors`` (conflict: error)."""
    if not tensors:
        raise RuleArgumentError(
            f"{side!r} is an empty list; the batch sharding is read from at least one tensor"
        )
    merged = einsum.merge(
        (("b", t.attr.multi_dims_mapping[:1]) for t in tensors if t.ndim),
        names=[f"{side}[{i}]" for i in range(len(tensors))],
    )
    return merged.get("b", ())


def _batch_mapping(t: TensorSpec, batch: tuple[int, ...]) -> MultiDims:
    n = t.ndim
    return (batch,) + ((),) * (n - 1) if n else ()


def _on_batch(tensors: Sequence[TensorSpec], batch: tuple[int, ...]) -> list[DistAttr]:
    return [attr(t, _batch_mapping(t, batch)) for t in tensors]


def _check_any(ins: Sequence[TensorSpec], outs: Sequence[TensorSpec]) -> None:
    if not ins and not outs:
        raise RuleArgumentError("'ins' and 'outs' are both empty; give at least one tensor")


def data_parallel_forward(ins: tuple[TensorSpec, ...], outs: tuple[TensorSpec, ...]) -> SpmdInfo:
    batch = _batch_dims("ins", ins)
    return SpmdInfo(_on_batch(ins, batch), _on_batch(outs, batch))


def data_parallel_reverse(ins: tuple[TensorSpec, ...], outs: tuple[TensorSpec, ...]) -> SpmdInfo:
    batch = _batch_dims("outs", outs)
    return SpmdInfo(_on_batch(ins, batch), _on_batch(outs, batch))


def replicated(ins: tuple[TensorSpec, ...], outs: tuple[TensorSpec, ...]) -> SpmdInfo:
    _check_any(ins, outs)
    return SpmdInfo(_on_batch(ins, ()), _on_batch(outs, ()))


# Both lists are arguments in both directions (Paddle's `(ins, outs)`): with no `outputs` params,
# the reverse binding `(*inputs, *outputs)` is the same `(ins, outs)`.
for _name in ("default_data_parallel", "default_"):
    register_rule(_name, forward=data_parallel_forward, reverse=data_parallel_reverse,
                  inputs=[Vec("ins"), Vec("outs")], outputs=[],
                  doc="Shard dim 0 of every tensor like the merged batch axis; replicate the rest.")
register_rule("replicated", forward=replicated, reverse=replicated,
              inputs=[Vec("ins"), Vec("outs")], outputs=[],
              doc="Replicate every input and output.")
