"""The end-to-end cases: small float64 models annotated per case on 1-D, 2-D and 2x2x2 meshes
(data-parallel, tensor-parallel, mixed, reduce-scatter, pending max, uneven, co-shard, GPT), shared
by the forward pipeline tests, the MPI tests and the reverse-mode tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from e2e_models import mlp64

import spmdrules as sr
from spmdrules import examples, ops
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph

MESH1 = sr.ProcessMesh([0, 1, 2, 3], dim_names=["x"])
MESH2 = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
MESH3 = sr.ProcessMesh.from_shape([2, 2, 2], dim_names=["dp", "pp", "mp"])

DP1 = {"x": ("x", None, None)}
TP1 = {"fc1.weight": (None, "x"), "fc1.bias": ("x",), "fc2.weight": ("x", None)}
# x sharded on batch and W1 on its columns over the same mesh dim: they cannot both hold,
# so completion moves data (an all-gather or all-to-all) between them
MIXED1 = {"x": ("x", None, None), "fc1.weight": (None, "x"), "out": (None, "x", None)}
DP2 = {"x": ("dp", "mp", None)}
TP2 = {"fc1.weight": ("dp", "mp"), "fc2.weight": ("mp", "dp")}
MEGATRON2 = {"x": ("dp", None, None), "fc1.weight": (None, "mp"), "fc1.bias": ("mp",),
             "fc2.weight": ("mp", None)}
# the result is wanted sharded on the hidden dim: the row-parallel partial is reduce-scattered
RESHARD2 = {**MEGATRON2, "fc2.add": ("dp", None, "mp")}
MIXED3 = {"x": (("dp", "pp"), None, None), "fc1.weight": (None, "mp"), "fc2.weight": ("mp", None),
          "out": ("dp", "mp", "pp")}
DP3 = {"x": ("dp", "pp", "mp")}


def _case(mesh: sr.ProcessMesh, specs: dict[str, Any], **kw: Any) -> Callable[[], Graph]:
    return lambda: mlp64(mesh, specs, **kw)


CASES: dict[str, Callable[[], Graph]] = {
    "1d-data-parallel": _case(MESH1, DP1),
    "1d-tensor-parallel": _case(MESH1, TP1),
    "1d-mixed": _case(MESH1, MIXED1, priority={"out": 1}),
    "2d-data-parallel": _case(MESH2, DP2),
    "2d-tensor-parallel": _case(MESH2, TP2),
    "2d-megatron": _case(MESH2, MEGATRON2),
    "2d-reduce-scatter": _case(MESH2, RESHARD2, priority={"fc2.add": 1}),
    "2d-partial-max-input": _case(MESH2, {"x": ("dp", None, None)}, partial={"x": {"mp": "max"}}),
    "2d-uneven": _case(MESH2, MEGATRON2, batch=3, seq=5, hidden=6, ffn=10),
    "3d-data-parallel": _case(MESH3, DP3),
    "3d-mixed-coshard": _case(MESH3, MIXED3, priority={"out": 1}),
    "2d-gpt": lambda: examples.gpt_decoder(2, MESH2, batch=4, seq=8, hidden=16, heads=4, ffn=32,
                                           vocab=32),
    "2d-llama": lambda: examples.llama_decoder(2, MESH2, batch=4, seq=8, hidden=16, heads=4,
                                               kv_heads=2, ffn=32, vocab=32),
}
LIMITS = {"input_ids": 32, "labels": 32, "position_ids": 8}


STAGE0 = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
STAGE1 = sr.ProcessMesh([[4, 5], [6, 7]], dim_names=["dp", "mp"])


def pipeline_stages(w1_spec: tuple[Any, ...]) -> Graph:
    """x -> tanh(x @ w0) on stage 0, then tanh(h @ w1) on stage 1 (w1 laid out as given)."""
    with Graph("pp") as g:
        x = g.input("x", [8, 16], "float64")
        w0 = g.param("w0", [16, 16], "float64")
        w1 = g.param("w1", [16, 16], "float64")
        h = ops.tanh(ops.matmul(x, w0, name="mm0"), name="h")
        ops.tanh(ops.matmul(h, w1, name="mm1"), name="out")
    shard(x, STAGE0, ("dp", None))
    shard(w0, STAGE0, (None, "mp"))
    shard(w1, STAGE1, w1_spec)
    return g
