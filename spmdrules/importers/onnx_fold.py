"""Nodes computed at import time: the shape arithmetic that exporters write around static shapes.

``torch.onnx.export`` computes every shape it needs from ``Shape`` (``Shape -> Gather ->
Unsqueeze -> Concat -> Reshape``, ``Range`` for positions, ``Equal``/``Where`` over shape
vectors for a mask's ``Expand``). spmdrules plans static shapes, so ``Shape`` is a constant
(``Static``), and a node whose inputs are all constants is computed here by ``onnx.reference``
(the ONNX reference evaluator, at the model's opset), whatever its type: its outputs are
constants too, read as shapes by the nodes that need shapes, and as data (a ``full`` or a named
constant source, ``Static.tensor``) by the others.

Never folded: a node that reads an initializer of floating type (a parameter keeps its name
and its gradient: the node is mapped onto graph ops instead), a node without inputs (``Constant``
has its own converter; the random generators are never constants), the random ops, and a
ConstantOfShape of more than FOLDED_FILL elements (a ``full``: folding it would hold every
element in memory).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from spmdrules.importers.errors import InvalidModelError
from spmdrules.importers.onnx_ops import Ctx, Value, onnx_op
from spmdrules.importers.onnx_values import Static

#: ops whose result is not a function of their inputs, or too large to hold as a constant
NEVER = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                   "Bernoulli", "Multinomial", "Dropout", "Constant"})
#: a ConstantOfShape of more elements is a ``full`` op: its constant would hold every element
FOLDED_FILL = 1 << 16


def foldable(imp: Any, node: Any) -> bool:
    """Whether ``node`` is computed at import time: every input a constant, none a parameter."""
    if node.op_type in NEVER or not any(node.input):
        return False
    for name in node.input:
        v = imp.env.get(name) if name else None
        if name and not isinstance(v, Static):
            return False
        if isinstance(v, Static) and v.param and v.value.dtype.kind in "fc":
            return False
    if node.op_type == "ConstantOfShape":
        shape = imp.env[node.input[0]].value
        return shape.dtype.kind in "iu" and bool((shape >= 0).all()) and int(
            np.prod(shape)) <= FOLDED_FILL
    return True


def fold(imp: Any, node: Any, where: str, mapped: bool) -> list[Static] | None:
    """``node``'s outputs computed by onnx.reference from its constant inputs; None where the
    reference cannot compute them and ``mapped`` (a converter maps the node onto graph ops, its
    constants sources: onnx 1.23's GatherElements fails on an index shorter than the data on
    another axis, which BERT's token types are)."""
    from onnx.reference import ReferenceEvaluator

    feeds = {n: imp.env[n].value for n in node.input if n}
    try:
        outs = ReferenceEvaluator(node, opsets={"": int(imp.opset)}).run(None, feeds)
    except Exception as e:
        if mapped:
            return None
        raise InvalidModelError(
            f"node {where!r} ({node.op_type}): its inputs are constants, but onnx.reference "
            f"cannot compute it from them: {type(e).__name__}: {e}") from e
    return [Static(name, np.asarray(v)) for name, v in zip(node.output, outs, strict=False)]


@onnx_op("Shape")
def _shape(c: Ctx) -> list[Value]:
    """The input's static shape (``start``/``end`` as Python slices read them, opset 15)."""
    shape = c.shape_of(0)
    start, end = int(c.attr("start", 0)), c.attr("end")
    return [Static(c.node.output[0], np.asarray(shape[start:end if end is None else int(end)],
                                                dtype=np.int64))]


@onnx_op("Size")
def _size(c: Ctx) -> list[Value]:
    n = int(np.prod(c.shape_of(0)))
    return [Static(c.node.output[0], np.asarray(n, dtype=np.int64))]


__all__ = ["NEVER", "fold", "foldable"]
