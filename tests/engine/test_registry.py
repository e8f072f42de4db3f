"""The registry: lookup, suggestions, binding by position and keyword, memoisation."""

from __future__ import annotations

from typing import Any

import pytest

import spmdrules as sr
from spmdrules.core.errors import DuplicateRegistrationError
from spmdrules.engine import registry
from spmdrules.engine.registry import A, T, Vec, register_rule

MESH = sr.ProcessMesh([[0, 1], [2, 3]])


def spec(shape: list[int], dm: list[int], partial: dict[int, str] | None = None) -> sr.TensorSpec:
    return sr.TensorSpec(shape, sr.DistAttr(MESH, dm, partial))


def test_unknown_op_suggests_close_names() -> None:
    with pytest.raises(sr.UnknownOpError) as e:
        sr.get_rule("relux")
    assert "relu" in e.value.suggestions
    assert "Did you mean" in str(e.value)
    assert isinstance(e.value, sr.SpmdError)


def test_list_rules_is_sorted_and_has_aliases() -> None:
    names = sr.list_rules()
    assert names == sorted(names)
    assert {"add", "elementwise_add", "relu", "gelu", "gelu_grad"} <= set(names)


def test_binding_by_position_and_keyword() -> None:
    rule = sr.get_rule("gelu")
    x = spec([8, 4], [0, -1])
    a = rule.infer_forward(x, True)
    b = rule.infer_forward(x, approximate=True)
    c = rule.infer_forward(x=x)
    assert a == b == c
    assert a.outputs[0].dims_mapping == (0, -1)


def test_binding_errors_name_op_and_argument() -> None:
    rule = sr.get_rule("gelu")
    x = spec([8, 4], [0, -1])
    with pytest.raises(
        sr.RuleArgumentError, match=r"gelu: unknown argument 'aproximate'.*'approximate'"
    ):
        rule.infer_forward(x, aproximate=True)
    with pytest.raises(sr.RuleArgumentError, match="gelu: missing tensor argument 'x'"):
        rule.infer_forward()
    with pytest.raises(sr.RuleArgumentError, match="attribute 'approximate' must be a bool"):
        rule.infer_forward(x, "yes")
    with pytest.raises(sr.RuleArgumentError, match="takes 2 arguments"):
        rule.infer_forward(x, True, 3)
    with pytest.raises(sr.RuleArgumentError, match="given twice"):
        rule.infer_forward(x, True, approximate=False)


def test_error_is_prefixed_with_the_op_called() -> None:
    with pytest.raises(sr.ShardingConflictError, match=r"^subtract: .*sharded by mesh dims"):
        sr.get_rule("subtract").infer_forward(spec([8, 16], [0, -1]), spec([8, 16], [1, -1]))


def test_tensors_must_share_one_mesh() -> None:
    other = sr.ProcessMesh([[4, 5], [6, 7]])
    y = sr.TensorSpec([8, 4], sr.DistAttr(other, [-1, -1]))
    with pytest.raises(sr.UnsupportedError, match="same ProcessMesh"):
        sr.get_rule("add").infer_forward(spec([8, 4], [0, -1]), y)


def test_no_reverse_rule_is_a_typed_error() -> None:
    with pytest.raises(sr.UnsupportedError, match="gelu_grad: has no reverse rule"):
        sr.get_rule("gelu_grad").infer_reverse()


def test_memoised_answers_are_identical_objects() -> None:
    rule = sr.get_rule("relu")
    x = spec([16, 4], [1, 0])
    assert rule.infer_forward(x) is rule.infer_forward(x)


def test_register_rule_with_list_argument_and_duplicates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_RULES", registry._RULES.copy())

    def fwd(xs: tuple[sr.TensorSpec, ...], axis: int) -> sr.SpmdInfo:
        return sr.SpmdInfo([tuple(t.attr for t in xs)], [xs[0].attr])

    rule = register_rule(
        "test_only_listy",
        forward=fwd,
        inputs=[Vec("xs")],
        outputs=[T("out")],
        attrs=[A("axis", "int", 0)],
    )
    x = spec([4], [0])
    info = rule.infer_forward([x, x], axis=1)
    assert info.inputs[0] == (x.attr, x.attr)
    assert rule.infer_forward([x, x], 1) is rule.infer_forward([x, x], axis=1)
    with pytest.raises(DuplicateRegistrationError, match="'test_only_listy': a rule is already "
                       r"registered for it, at .*test_registry.py:\d+; the second registration"):
        register_rule("test_only_listy", forward=fwd, inputs=[Vec("xs")], outputs=[T("out")])


def test_reverse_attrs_are_public_and_may_differ_from_the_forward_ones() -> None:
    rb = sr.get_rule("reduce_base")
    assert [a.name for a in rb.attrs] == ["axis", "keep_dim", "reduce_type"]
    assert rb.reverse_attrs is not None
    assert [a.name for a in rb.reverse_attrs] == ["axis", "keep_dim"]
    assert sr.get_rule("matmul").reverse_attrs == sr.get_rule("matmul").attrs
    assert sr.get_rule("add_n").reverse_attrs is None


def test_validation_does_not_depend_on_the_memo() -> None:
    """issue 16, item 3: 0.0 == False and (1.0, 0.0) == (1, 0) with one hash each; a warm memo
    must not accept what a cold one refuses."""
    mesh = sr.ProcessMesh([[0, 1], [2, 3]])
    x = sr.TensorSpec([4, 4], sr.DistAttr(mesh, [0, -1]))
    y = sr.TensorSpec([4, 4], sr.DistAttr(mesh, [-1, -1]))
    calls: list[tuple[str, tuple[Any, ...], tuple[Any, ...]]] = [
        ("matmul", (x, y), (False, False)), ("matmul", (x, y), (0.0, 0.0)),
        ("softmax", (x,), (1,)), ("softmax", (x,), (1.0,)), ("softmax", (x,), (True,)),
        ("transpose", (x,), ((1, 0),)), ("transpose", (x,), ((1.0, 0.0),)),
        ("transpose", (x,), ([1.0, 0.0],)),
    ]
    for name, _, _ in calls:
        sr.get_rule(name).cache_clear()

    def answer(name: str, tensors: tuple[Any, ...], attrs: tuple[Any, ...]) -> str:
        try:
            return str(sr.get_rule(name).infer_forward(*tensors, *attrs))
        except sr.SpmdError as e:
            return type(e).__name__

    cold = [answer(*c) for c in calls]
    warm = [answer(*c) for c in calls]  # every valid call is now memoised
    assert cold == warm
    assert cold[1] == cold[3] == cold[4] == cold[6] == cold[7] == "RuleArgumentError"
