"""One attribute coercion serves the registry and the graph (issue 25 item 6: building a graph took
``trans_y=np.bool_(True)`` where ``get_rule("matmul").infer_forward`` refused it): both accept and
refuse the same values, and normalise them alike."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import spmdrules as sr
from spmdrules.core.errors import RuleArgumentError
from spmdrules.engine.attributes import AttrParam, check_attr
from spmdrules.graph.errors import OpAttributeError
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([0, 1], dim_names=["x"])

#: (attribute type, value, what both checkers make of it; None: both refuse it)
CASES: list[tuple[str, Any, Any]] = [
    ("bool", True, True), ("bool", np.bool_(True), True), ("bool", 0, False),
    ("bool", np.int64(1), True), ("bool", 2, None), ("bool", "true", None),
    ("int", np.int32(3), 3), ("int", True, None), ("int", 3.0, None),
    ("float", np.float32(0.5), 0.5), ("float", np.int64(2), 2.0), ("float", False, None),
    ("number", np.int64(7), 7), ("number", 2.5, 2.5), ("number", np.bool_(True), None),
    ("ints", np.array([1, 2]), (1, 2)), ("ints", range(3), (0, 1, 2)), ("ints", 4, (4,)),
    ("ints", [1, True], None), ("ints", "12", None),
    ("floats", [1, np.float32(0.5)], (1.0, 0.5)), ("floats", [0.5, None], None),
    ("str", "NCHW", "NCHW"), ("str", 1, None),
    ("dtype", "float16", "float16"), ("dtype", np.float32, "float32"),
    ("dtype", np.dtype("int8"), "int8"), ("dtype", 3, None),
]


@pytest.mark.parametrize(("kind", "value", "want"), CASES,
                         ids=[f"{k}-{v!r}" for k, v, _ in CASES])
def test_the_registry_and_the_graph_coerce_alike(kind: str, value: Any, want: Any) -> None:
    p = AttrParam("a", kind, None)  # type: ignore[arg-type]
    if want is None:
        with pytest.raises(RuleArgumentError, match=r"op_x: attribute 'a' must be"):
            check_attr("op_x", p, value)
        from spmdrules.graph.opschema import _check_attr as graph_check
        with pytest.raises(OpAttributeError, match=r"op 'n1' \(op_x\): attribute 'a' must be"):
            graph_check("n1", "op_x", p, value)
        return
    from spmdrules.graph.opschema import _check_attr as graph_check
    got = check_attr("op_x", p, value)
    assert got == want and type(got) is type(want)
    again = graph_check("n1", "op_x", p, value)
    assert again == want and type(again) is type(want)


def test_matmul_takes_a_numpy_bool_in_the_graph_and_in_the_rule_alike() -> None:
    g = Graph("g")
    x, w = g.input("x", [4, 6]), g.param("w", [8, 6])
    y = g.add_op("matmul", [x, w], {"trans_y": np.bool_(True)}, name="y")
    assert y.results[0].shape == (4, 8) and y.attrs == (False, True)
    rule = sr.get_rule("matmul")
    xs = sr.TensorSpec([4, 6], sr.DistAttr(MESH, [0, -1]))
    ws = sr.TensorSpec([8, 6], sr.DistAttr(MESH, [-1, -1]))
    by_numpy = rule.infer_forward(xs, ws, trans_y=np.bool_(True))
    assert by_numpy == rule.infer_forward(xs, ws, trans_y=True)
