"""moe_combine and its gradient rule: x's rows gathered by index, typed errors, the kernel
against a direct loop, and the deviations proven by execution."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from proofs import execute

import spmdrules as sr
from spmdrules.core.errors import RuleArgumentError
from spmdrules.execution.executor import run_serial
from spmdrules.graph import ops
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1], [2, 3]])
MOE = sr.get_rule("moe_combine")
GRAD = sr.get_rule("moe_combine_grad")


def spec(shape: list[int], dm: list[int], partial: Any = None) -> sr.TensorSpec:
    return sr.TensorSpec(shape, sr.DistAttr(MESH, dm, partial))


def dms(info: sr.SpmdInfo) -> list[Any]:
    return [(list(a.dims_mapping), dict(a.partial)) for a in (*info.inputs, *info.outputs)]  # type: ignore[union-attr]


def test_tokens_split_y_and_split_x_rows_or_k_leave_y_pending() -> None:
    info = MOE.infer_forward(spec([8, 6], [-1, 1]), spec([4, 2], [0, -1]), spec([4, 2], [0, -1]))
    assert dms(info)[3] == ([0, 1], {})
    info = MOE.infer_forward(spec([8, 6], [0, -1]), spec([4, 2], [-1, 1]), spec([4, 2], [-1, 1]))
    assert dms(info)[3] == ([-1, -1], {0: "sum", 1: "sum"})


def test_a_split_k_leaves_the_hidden_dim_whole_as_paddle() -> None:
    info = MOE.infer_forward(spec([8, 6], [-1, 0]), spec([4, 2], [-1, 1]), spec([4, 2], [-1, 1]))
    assert dms(info)[0] == ([-1, -1], {}) and dms(info)[3] == ([-1, -1], {1: "sum"})


def test_gradient_rule_keeps_k_whole_and_marks_the_pending_sums() -> None:
    info = GRAD.infer_forward(spec([8, 6], [-1, 1]), spec([4, 2], [0, -1]), spec([4, 2], [0, -1]),
                              spec([4, 6], [0, 1]))
    assert dms(info)[4:] == [([-1, 1], {0: "sum"}), ([0, -1], {1: "sum"}), ([0, -1], {})]


def test_bad_shapes_are_typed_errors() -> None:
    with pytest.raises(RuleArgumentError, match="2-D"):
        MOE.infer_forward(spec([8], [-1]), spec([4, 2], [-1, -1]), spec([4, 2], [-1, -1]))
    with pytest.raises(RuleArgumentError, match="scatter_index"):
        MOE.infer_forward(spec([8, 6], [-1, -1]), spec([4, 2], [-1, -1]), spec([4, 3], [-1, -1]))


def test_kernel_is_the_combine_loop() -> None:
    rng = np.random.default_rng(3)
    x, w, idx = rng.standard_normal((6, 3)), rng.standard_normal((4, 2)), rng.integers(0, 6, (4, 2))
    with Graph("moe") as g:
        y = ops.moe_combine(g.input("x", [6, 3], "float64"), g.input("w", [4, 2], "float64"),
                            g.input("i", [4, 2], "int64"))
    want = np.zeros((4, 3))
    for i in range(4):
        for k in range(2):
            want[i] += x[idx[i, k]] * w[i, k]
    np.testing.assert_allclose(run_serial(g, {"x": x, "w": w, "i": idx})[y.name], want, atol=1e-12)


DOMAINS = ("real", "real", "index:16")


def test_deviation_moe_combine_x_rows_follow_tokens() -> None:
    # moe_combine/forward/0 on a 2x2 mesh: Paddle splits x's rows like the tokens
    x, w = spec([16, 4], [0, -1]), spec([10, 4], [-1, -1])
    a = sr.DistAttr(MESH, [0, -1])
    paddle = sr.SpmdInfo([a, a, a], [a])
    assert execute("moe_combine", [x, w, w], paddle, {}, DOMAINS) == "wrong"
    ours = MOE.infer_forward(x, w, w)
    assert dms(ours)[3] == ([-1, -1], {0: "sum"})
    assert execute("moe_combine", [x, w, w], ours, {}, DOMAINS) == "ok"


def test_deviation_moe_combine_partial_mesh_dim() -> None:
    # quirk 17: k split on mesh dim 0, Paddle marks y partial on mesh dim 1
    x, w = spec([16, 4], [-1, -1]), spec([10, 4], [-1, 0])
    k0 = sr.DistAttr(MESH, [-1, 0])
    paddle = sr.SpmdInfo([x.attr, k0, k0], [sr.DistAttr(MESH, [-1, -1], {1: "sum"})])
    assert execute("moe_combine", [x, w, w], paddle, {}, DOMAINS) == "wrong"
    ours = MOE.infer_forward(x, w, w)
    assert dms(ours)[3] == ([-1, -1], {0: "sum"})
    assert execute("moe_combine", [x, w, w], ours, {}, DOMAINS) == "ok"


def test_deviation_moe_combine_grad_weights_miss_hidden_sum() -> None:
    # moe_combine/reverse/21: the hidden dim split on mesh dim 1, grad_combine_weights complete
    x, w, g = spec([4, 3], [-1, -1]), spec([4, 2], [-1, -1]), spec([4, 3], [-1, 1])
    h1 = sr.DistAttr(MESH, [-1, 1])
    rep = sr.DistAttr(MESH, [-1, -1])
    paddle = sr.SpmdInfo([h1, rep, rep, h1], [h1, rep, rep])
    doms = ("real", "real", "index:4", "real")
    assert execute("moe_combine_grad", [x, w, w, g], paddle, {}, doms) == "wrong"
    ours = GRAD.infer_forward(x, w, w, g)
    assert dms(ours)[5] == ([-1, -1], {1: "sum"})
    assert execute("moe_combine_grad", [x, w, w, g], ours, {}, doms) == "ok"
