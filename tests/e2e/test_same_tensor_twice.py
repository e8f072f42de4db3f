"""One tensor in two operand slots of one op (issue 16, item 1).

A rule may want the two slots of ``multiply(y, y)`` in two layouts (a pending sum in one, the
reduced value in the other), so a reshard edge and its buffer belong to a slot, not to the
(tensor, consumer) pair. Every op that can take one tensor twice runs with a partial, a sharded
and a co-sharded operand, forward on the simulated mesh against serial numpy and in reverse
against numerical derivatives; two cases also run on MPI.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from sharded_runs import assert_simulated_equals_serial

import spmdrules as sr
from spmdrules import ops
from spmdrules.completion import complete
from spmdrules.execution.executor import max_error, random_feeds, run_serial
from spmdrules.execution.lowering import lower
from spmdrules.execution.mpi import run_mpi
from spmdrules.graph.annotate import shard
from spmdrules.graph.graph import Graph
from spmdrules.graph.nodes import Tensor

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
Twice = Callable[[Graph, Tensor], Tensor]

def _binary(name: str) -> Twice:
    return lambda g, t: getattr(ops, name)(t, t)  # type: ignore[no-any-return]


#: the ops that may take one tensor twice, each given ``t`` in two (or more) slots
TWICE: dict[str, Twice] = {
    **{name: _binary(name) for name in ("add", "subtract", "multiply", "divide", "maximum",
                                        "minimum")},
    "matmul": lambda g, t: ops.matmul(t, t),
    "matmul-trans": lambda g, t: ops.matmul(t, t, trans_x=True),
    "einsum": lambda g, t: ops.einsum([t, t], equation="ij,jk->ik"),
    "concat": lambda g, t: ops.concat([t, t], axis=1),
    "add_n": lambda g, t: ops.add_n([t, t, t]),
    "stack": lambda g, t: ops.stack([t, t], axis=0),
    "where": lambda g, t: ops.where(g.input("c", [8, 8], "bool"), t, t),
}


def _partial(g: Graph) -> Tensor:
    """A pending sum over mp: the row sums of a (dp, mp) matrix, kept 2-D."""
    z = g.input("z", [8, 8, 4], "float64")
    shard(z, MESH, ("dp", None, "mp"))
    return ops.sum(z, axis=[2])


def _sharded(g: Graph) -> Tensor:
    x = g.input("x", [8, 8], "float64")
    shard(x, MESH, ("dp", "mp"))
    return x


def _coshard(g: Graph) -> Tensor:
    x = g.input("x", [8, 8], "float64")
    shard(x, MESH, (("dp", "mp"), None))
    return x


LAYOUTS: dict[str, Callable[[Graph], Tensor]] = {
    "partial": _partial, "sharded": _sharded, "coshard": _coshard}


def _graph(op: str, layout: str) -> Graph:
    with Graph(f"{op}-{layout}") as g:
        t = LAYOUTS[layout](g)
        out = TWICE[op](g, t)
        ops.multiply(out, out, name="loss")  # and once more: the result twice as well
    return g


def _feeds(g: Graph, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {t.name: (rng.random(t.shape) > 0.5 if t.dtype == "bool"
                     else rng.uniform(0.5, 1.5, t.shape))
            for t in g.tensors if t.producer is None}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("op", sorted(TWICE))
def test_one_tensor_in_two_slots_equals_serial_forward_and_reverse(op: str, layout: str) -> None:
    g = _graph(op, layout)
    prog = lower(complete(g))
    feeds = _feeds(g, 1)
    assert_simulated_equals_serial(g, feeds, prog=prog, what=f"{op}/{layout}: ")


def test_the_two_slots_get_two_edges_and_two_buffers() -> None:
    # multiply(y, y) with y pending over mp: the rule keeps one slot pending and reduces the other
    g = _graph("multiply", "partial")
    r = complete(g)
    prog = lower(r)
    call = prog.calls["multiply_1"]
    assert call.inputs[0] != call.inputs[1]
    edges = [e for e in r.reshards if e.op == "multiply_1"]
    assert [e.slot for e in edges] == [1] and edges[0].tensor == "sum_0"


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("op", ["multiply", "matmul"])
def test_one_tensor_in_two_slots_on_mpi(op: str) -> None:
    g = _graph(op, "partial" if op == "multiply" else "sharded")
    prog = lower(complete(g))
    feeds = random_feeds(prog, seed=3)
    run = run_mpi(prog, feeds, nprocs=4, timeout=90)
    err, worst = max_error(run.values, run_serial(g, feeds))
    assert err <= 1e-12, f"{op}: {worst} differs by {err}"
    assert run.traffic.mismatches(prog) == []
