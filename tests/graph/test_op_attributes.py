"""A graph op carries every attribute of the Paddle op: its rule sees the subset it declares, shape
inference and the kernel see them all (issue 11, "Op attributes beyond the rule's")."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import spmdrules as sr
from spmdrules import examples
from spmdrules.completion import complete
from spmdrules.engine.registry import A, T, register_rule
from spmdrules.execution.executor import run_serial
from spmdrules.execution.lowering import lower
from spmdrules.execution.simulated import run_simulated
from spmdrules.graph import ops
from spmdrules.graph.errors import OpAttributeError
from spmdrules.graph.exchange import dumps, loads
from spmdrules.graph.graph import Graph

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])


def test_the_rule_takes_none_of_scale_s_attributes_but_the_op_has_them() -> None:
    rule = sr.get_rule("scale")
    assert rule.attrs == ()
    assert [(a.name, a.default) for a in rule.op_attrs] == [
        ("scale", 1.0), ("bias", 0.0), ("bias_after_scale", True)
    ]
    with Graph() as g:
        x = g.input("x", [4, 6])
        y = ops.scale(x, scale=0.125, bias=1.0, name="s")
    op = g.op("s")
    assert op.attrs == ()  # what the rule is called with
    assert op.attr("scale") == 0.125 and op.attr("bias_after_scale") is True
    assert op.attr_dict == {"scale": 0.125, "bias": 1.0, "bias_after_scale": True}
    feeds = {"x": np.arange(24.0).reshape(4, 6)}
    np.testing.assert_allclose(run_serial(g, feeds)[y.name], 0.125 * feeds["x"] + 1.0)


def test_attributes_by_position_follow_the_rule_s_then_the_op_s() -> None:
    with Graph() as g:
        x = g.input("x", [3])
        ops.clip(x, -0.5, 0.5, name="c")
        ops.softmax(x, 0, name="s")
    assert g.op("c").attr_dict == {"min": -0.5, "max": 0.5}
    assert g.op("s").attr_dict == {"axis": 0}


def test_an_unknown_attribute_names_the_op_and_lists_the_valid_ones() -> None:
    with Graph() as g:
        x = g.input("x", [4])
        with pytest.raises(OpAttributeError) as e:
            ops.scale(x, scal=2.0)
    msg = str(e.value)
    assert "ops.scale" in msg and "'scal'" in msg and "did you mean 'scale'" in msg
    assert "scale, bias, bias_after_scale" in msg
    with Graph() as g:
        x = g.input("x", [4])
        with pytest.raises(OpAttributeError, match=r"\(leaky_relu\).*valid attributes are: "
                           r"negative_slope"):
            g.add_op("leaky_relu", [x], {"slope": 0.1}, name="l")
        with pytest.raises(OpAttributeError, match="'scale' must be a float"):
            ops.scale(x, scale="big")


def test_kernels_read_the_op_s_attributes_on_every_layout() -> None:
    rng = np.random.default_rng(0)
    with Graph() as g:
        x = g.input("x", [8, 6])
        sr.shard(x, MESH, ["dp", "mp"])
        a = ops.leaky_relu(x, negative_slope=0.3, name="a")
        b = ops.clip(a, min=-0.2, max=0.4, name="b")
        c = ops.pow(b, y=3.0, name="c")
    feeds = {"x": rng.standard_normal((8, 6))}
    want = np.clip(np.where(feeds["x"] > 0, feeds["x"], 0.3 * feeds["x"]), -0.2, 0.4) ** 3
    np.testing.assert_allclose(run_serial(g, feeds)[c.name], want)
    got = run_simulated(lower(complete(g)), feeds)
    np.testing.assert_allclose(got.fetch(c.name), want)


def test_keyword_named_attributes_go_by_mapping() -> None:
    with Graph() as g:
        x = g.input("x", [5])
        y = ops.mish(x, **{"lambda": 1.0})
    assert g.op(y.producer.name).attr("lambda") == 1.0


def test_json_keeps_the_op_s_attributes() -> None:
    with Graph() as g:
        x = g.input("x", [4])
        ops.scale(x, scale=0.5, bias=2.0, name="s")
    doc = json.loads(dumps(g))
    assert doc["ops"][0]["attrs"] == {"scale": 0.5, "bias": 2.0, "bias_after_scale": True}
    back = loads(dumps(g))
    assert back.op("s").attr_dict == g.op("s").attr_dict
    assert back == g


def test_the_op_s_attributes_are_part_of_the_graph_s_identity() -> None:
    def build(s: float) -> Graph:
        with Graph("g") as g:
            x = g.input("x", [4])
            ops.scale(x, scale=s, name="s")
        return g

    assert build(0.5) == build(0.5)
    assert build(0.5) != build(0.25)


def test_an_op_attribute_may_not_repeat_a_rule_argument() -> None:
    with pytest.raises(sr.SpmdError, match="'axis' is also a rule argument"):
        register_rule(
            "test_op_attrs_clash", forward=lambda x, axis: None, inputs=[T("x")],
            outputs=[T("out")], attrs=[A("axis", "int", 0)], op_attrs=[A("axis", "int", 1)],
        )
    assert "test_op_attrs_clash" not in sr.list_rules()


def test_the_gpt_example_scales_attention_by_one_over_sqrt_head_dim() -> None:
    g = examples.gpt_decoder(2, MESH, batch=2, seq=4, hidden=16, heads=4, ffn=32, vocab=32)
    for i in range(2):
        assert g.op(f"layers.{i}.attn.scale").attr("scale") == pytest.approx(1 / math.sqrt(4))
