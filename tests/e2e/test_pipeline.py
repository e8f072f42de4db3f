"""Annotate, complete, lower, run on the simulated mesh: the serial answer, and the plan's bytes.

Every case runs float64 data through a float64 graph, so the bytes counted must equal the plans'
totals exactly, and every tensor must equal the serial numpy result to 1e-12 (relative to its
scale).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import spmdrules as sr
from spmdrules import examples
from spmdrules.completion import complete
from spmdrules.executor import max_error, random_feeds, run_serial
from spmdrules.executor_sim import run_simulated
from spmdrules.graph import Graph
from spmdrules.lowering import Collective, lower


def _load_models() -> Any:
    """tests/e2e is no package (pytest imports with importlib): load the shared builders."""
    name = "e2e_models"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


mlp64 = _load_models().mlp64

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
}
LIMITS = {"input_ids": 32, "labels": 32, "position_ids": 8}


@pytest.mark.parametrize("name", sorted(CASES))
def test_pipeline_reproduces_serial_and_the_plans_bytes(name: str) -> None:
    g = CASES[name]()
    r = complete(g)
    prog = lower(r)
    feeds = random_feeds(prog, seed=7, vocab_limits=LIMITS)
    res = run_simulated(prog, feeds)
    err, worst = max_error(res.fetch_all(), run_serial(g, feeds))
    assert err <= 1e-12, f"{name}: {worst} differs by {err}"
    if "uneven" in name:
        # plans price the largest block; uneven blocks send no more than that
        for label, want in res.traffic.predicted(prog).items():
            assert res.traffic.per_edge.get(label, 0) <= want
    else:
        assert res.traffic.mismatches(prog) == []
    assert set(res.traffic.per_edge) <= {e.label for e in prog.edges}


def test_cases_cover_every_collective_kind() -> None:
    kinds: set[str] = set()
    for build in CASES.values():
        prog = lower(complete(build()))
        kinds |= {i.kind for i in prog.instructions if isinstance(i, Collective)}
    assert {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "slice"} <= kinds


def test_float64_data_through_a_float32_graph_sends_twice_the_plan() -> None:
    g = examples.mlp(MESH2, batch=4, seq=8, hidden=16, ffn=32)
    prog = lower(complete(g))
    feeds = random_feeds(prog, seed=1)
    res = run_simulated(prog, feeds)
    [edge] = prog.edges
    assert res.traffic.per_edge[edge.label] == 2 * edge.plan.total_bytes
    assert res.traffic.mismatches(prog) == []


def test_a_wrong_kernel_block_is_named() -> None:
    from spmdrules.executor import ExecutionError

    g = mlp64(MESH2, MEGATRON2)
    prog = lower(complete(g))
    feeds = random_feeds(prog, seed=1)
    feeds["x"] = np.zeros((1, 2, 3))
    with pytest.raises(ExecutionError, match="'x' has shape"):
        run_simulated(prog, feeds)
