"""A graph rebuilt with its tensors, ops and annotations inserted in a random order (for the
determinism tests of the graph and of completion)."""

from __future__ import annotations

import random
from typing import Any

from spmdrules.graph.annotate import shard
from spmdrules.graph.annotation import OPEN
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Tensor


def names(v: Tensor | tuple[Tensor, ...] | None) -> Any:
    if v is None or isinstance(v, Tensor):
        return None if v is None else v.name
    return [t.name for t in v]


def rebuild_shuffled(src: Graph, seed: int) -> Graph:
    """Declare every tensor, then add every op, each in a random order; copy the annotations."""
    rng = random.Random(seed)
    tensors = list(src.tensors)
    rng.shuffle(tensors)
    g = Graph(src.name)
    for t in tensors:
        make = {"input": g.input, "param": g.param, "value": g.declare}[t.role]
        make(t.name, t.shape, t.dtype)
    ops = list(src.ops)
    rng.shuffle(ops)
    for op in ops:
        g.add_op(op.type, [names(v) for v in op.operands], op.attr_dict, name=op.name,
                 results=[t.name for t in op.outputs])
    annotated = list(src.annotated())
    rng.shuffle(annotated)
    for t in annotated:
        ann = t.annotation
        assert ann is not None
        spec = [OPEN if d is None else d for d in ann.dims]
        closed = [i for i, c in enumerate(ann.closed) if c]
        shard(g.tensor(t.name), ann.mesh, spec, partial=dict(ann.partial), priority=ann.priority,
              closed=closed)
    return g.validate(full=True)
