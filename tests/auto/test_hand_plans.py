"""A hand plan is priced like an auto plan, also where its completion splits a dim unevenly
(Mixtral's Megatron plan on 8 devices: 4 experts over 8 processes): the reshard is priced by
the planner's own plans, which completion runs, not left infinite because the solver's graph
of even splits does not reach it (issue 27)."""

from __future__ import annotations

import math

import spmdrules as sr
from spmdrules import auto, plan
from spmdrules.completion import complete
from spmdrules.completion.reshard_plans import plan_reshard
from spmdrules.graph import ops
from spmdrules.graph.graph import Graph


def test_an_uneven_split_gathered_by_completion_is_priced_by_its_plans() -> None:
    with Graph("uneven") as g:
        x = g.input("x", [4, 64])  # 4 rows over 8 processes: 4 of them hold none
        y = ops.relu(ops.matmul(x, g.param("w", [64, 64])))
    mesh = sr.ProcessMesh.from_shape((8,), dim_names=("x",))
    styles = {"x": plan.Spec(("x", None)), y.name: plan.Spec((None, None))}
    opts = auto.Options()
    e = auto.evaluate(g, mesh, styles, opts)
    assert math.isfinite(e.communication) and math.isfinite(e.time)
    plan.apply(g, mesh, styles)
    (edge,) = complete(g).reshards  # the uneven split gathered before y
    fwd = plan_reshard(edge.src, edge.dst, edge.shape, edge.dtype, opts.cost).time
    back = plan_reshard(edge.dst.without_partial(), edge.src.without_partial(), edge.shape,
                        edge.dtype, opts.cost).time
    assert e.communication >= fwd + back > 0  # and the weight's gradient sync, if any
