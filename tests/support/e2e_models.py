"""Small float64 models for the end-to-end tests, annotated per case."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import spmdrules as sr
from spmdrules import ops
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph

Spec = Sequence[Any]


def mlp64(mesh: sr.ProcessMesh, specs: Mapping[str, Spec], *, batch: int = 4, seq: int = 6,
          hidden: int = 8, ffn: int = 16, partial: Mapping[str, dict[Any, str]] | None = None,
          priority: Mapping[str, int] | None = None) -> Graph:
    """``gelu(x @ W1 + b1) @ W2 + b2`` then a softmax over the last dim, all float64.

    ``specs`` annotates tensors by name (x, fc1.weight, fc1.bias, fc2.weight, fc2.bias, or a
    result: fc1.matmul, gelu, fc2.add, out)."""
    with Graph("mlp64") as g:
        x = g.input("x", [batch, seq, hidden], "float64")
        w1 = g.param("fc1.weight", [hidden, ffn], "float64")
        b1 = g.param("fc1.bias", [ffn], "float64")
        w2 = g.param("fc2.weight", [ffn, hidden], "float64")
        b2 = g.param("fc2.bias", [hidden], "float64")
        f = ops.matmul(x, w1, name="fc1.matmul")
        f = ops.add(f, b1, name="fc1.add")
        f = ops.gelu(f, name="gelu")
        f = ops.matmul(f, w2, name="fc2.matmul")
        f = ops.add(f, b2, name="fc2.add")
        ops.softmax(f, axis=-1, name="out")
    for name, spec in specs.items():
        shard(g.tensor(name), mesh, spec, partial=(partial or {}).get(name),
              priority=(priority or {}).get(name, 0))
    return g
