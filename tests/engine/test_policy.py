"""The engine's Policy: what a described op keeps of pending sums and masks, derived both ways.

Each field is tried on the engine directly (a Description and ``infer_forward`` /
``infer_reverse``), then on the families that use it, with the bad inputs a user can give.
"""

from __future__ import annotations

import pytest

import spmdrules as sr
from spmdrules.core.errors import RuleArgumentError, ShardingConflictError
from spmdrules.engine.description import Description, infer_forward, infer_reverse
from spmdrules.engine.policy import EVERY_REDUCTION, LINEAR_REDUCTIONS, Policy

MESH = sr.ProcessMesh([[0, 1, 2], [3, 4, 5]], dim_names=["dp", "mp"])


def spec(shape: list[int], mapping: list[int], partial: dict[int, str] | None = None,
         masks: dict[int, int] | None = None) -> sr.TensorSpec:
    return sr.TensorSpec(shape, sr.DistAttr(MESH, mapping, partial or {}, masks=masks))


def dms(info: sr.SpmdInfo) -> tuple[list[object], list[object]]:
    def one(a: object) -> object:
        if not isinstance(a, sr.DistAttr):
            return a
        return list(a.dims_mapping), dict(a.partial_items)
    return [one(a) for a in info.inputs], [one(a) for a in info.outputs]


PRODUCT = Description(("ab", "ab"), ("ab",), linear=(0, 1),
                      policy=Policy(linear_types=LINEAR_REDUCTIONS, factors=True))


def test_factors_pass_the_first_pending_factor_only() -> None:
    x, y = spec([4, 6], [-1, -1], {0: "sum"}), spec([4, 6], [-1, -1], {1: "avg"})
    assert dms(infer_forward(PRODUCT, [x, y])) == (
        [([-1, -1], {0: "sum"}), ([-1, -1], {})], [([-1, -1], {0: "sum"})])
    # x has none: y's passes
    assert dms(infer_forward(PRODUCT, [spec([4, 6], [-1, -1]), y]))[1] == [([-1, -1], {1: "avg"})]


@pytest.mark.parametrize(("x", "why"), [
    (spec([4, 6], [-1, -1], {0: "max"}), "max(a, b) * y is no max of products"),
    (spec([4, 6], [-1, 0], {1: "sum"}), "only that factor's pending dim is free"),
])
def test_factors_resolve_every_pending_factor_when_one_cannot_pass(x: sr.TensorSpec,
                                                                   why: str) -> None:
    y = spec([4, 6], [0, -1])  # mesh dim 0 shards the result
    got = infer_forward(PRODUCT, [x if why.startswith("max") else spec([4, 6], [-1, 1], {0: "sum"}),
                                  y])
    assert all(not a.partial_items for a in (*got.inputs, *got.outputs)
               if isinstance(a, sr.DistAttr)), why


def test_linear_types_let_a_permutation_pass_every_reduction() -> None:
    x = spec([4, 6], [-1, 1], {0: "max"})
    plain = Description(("ab",), ("ba",), linear=(0,))
    permutation = Description(("ab",), ("ba",), linear=(0,),
                              policy=Policy(linear_types=EVERY_REDUCTION))
    assert dms(infer_forward(plain, [x]))[1] == [([1, -1], {})]
    assert dms(infer_forward(permutation, [x])) == ([([-1, 1], {0: "max"})], [([1, -1], {0: "max"})])


def test_reverse_linear_keeps_the_outputs_pending_sums_on_the_linear_inputs() -> None:
    desc = Description(("ab",), ("a",), linear=(0,), policy=Policy(reverse_linear=True))
    out = spec([4], [1], {0: "sum", })
    assert dms(infer_reverse(desc, [spec([4, 6], [-1, -1])], [out])) == (
        [([1, -1], {0: "sum"})], [([1], {0: "sum"})])
    plain = Description(("ab",), ("a",), linear=(0,))
    assert dms(infer_reverse(plain, [spec([4, 6], [-1, -1])], [out])) == (
        [([1, -1], {})], [([1], {})])


def test_even_letters_are_whole_where_their_mesh_dims_do_not_divide_them() -> None:
    desc = Description(("ab",), ("a",), pending="avg", policy=Policy(even=frozenset("b")))
    # b (size 4) on mp (3): uneven, so no mean of unequal blocks; a (size 5) is not asked
    assert dms(infer_forward(desc, [spec([5, 4], [0, 1])])) == ([([0, -1], {})], [([0], {})])
    assert dms(infer_forward(desc, [spec([5, 6], [0, 1])])) == (
        [([0, 1], {})], [([0], {1: "avg"})])


def test_unread_inputs_keep_their_own_attribute() -> None:
    x = spec([4, 6], [0, -1], {1: "sum"})
    desc = Description(("ab",), ("ab",), policy=Policy(unread=(0,)))
    info = infer_forward(desc, [x])
    assert info.inputs == (x.attr,) and dms(info)[1] == [([0, -1], {})]
    out = spec([4, 6], [-1, 1])
    assert infer_reverse(desc, [x], [out]).inputs == (x.attr,)


def test_reverse_claims_broadcast_only_in_reverse() -> None:
    desc = Description(("a11",), ("a11", "a"), policy=Policy(reverse_claims_broadcast=True))
    x = spec([4, 6, 6], [-1, 0, 1])
    assert dms(infer_forward(desc, [x]))[1] == [([-1, -1, -1], {}), ([-1], {})]
    with pytest.raises(ShardingConflictError, match=r"size-1 dims 'outputs 0' dim 1 and 'outputs 0' "
                                                    r"dim 2 .*replicate it \(-1\)"):
        infer_reverse(desc, [x], [x, spec([4], [-1])])


def test_a_description_without_inputs_leaves_its_result_unplaced() -> None:
    desc = Description((), ("ab",))
    assert infer_forward(desc, []).outputs == (None,)
    out = spec([4, 6], [1, -1], {0: "sum"})
    assert dms(infer_reverse(desc, [], [out])) == ([], [([1, -1], {})])


# ---- the families on these policies, and what they refuse -------------------------------------
def test_multiply_carries_a_masked_sum_through_the_engine() -> None:
    x = spec([4, 6], [-1, 1], {0: "sum"}, masks={0: 0})
    info = sr.get_rule("multiply").infer_forward(x, spec([4, 6], [-1, 1]))
    assert info.outputs[0].masks == {0: 0} and info.outputs[0].partial_items == ((0, "sum"),)
    # relu(0) = 0 keeps the mask; exp(0) = 1 does not
    assert sr.get_rule("relu").infer_forward(x).outputs[0].masks == {0: 0}
    assert sr.get_rule("exp").infer_forward(x).outputs[0].masks == {}


def test_conflicts_name_both_tensors_and_dims() -> None:
    with pytest.raises(ShardingConflictError,
                       match=r"^add: tensor axis 'a' \(tensor 'y' dim 0\) is sharded by mesh dims "
                             r"\[0\] and \[1\] \('x' dim 0 has \[0\]\)"):
        sr.get_rule("add").infer_forward(spec([4, 6], [0, -1]), spec([4, 6], [1, -1]))


@pytest.mark.parametrize(("op", "call", "message"), [
    ("add", lambda r: r.infer_reverse(spec([4, 6], [-1, -1]), spec([6], [-1]),
                                      spec([4, 1], [-1, -1])),
     r"'out' has shape \[4, 1\] but broadcasting 'x' \[4, 6\] and 'y' \[6\] gives \[4, 6\]"),
    ("relu", lambda r: r.infer_reverse(spec([4, 6], [-1, -1]), spec([6, 4], [-1, -1])),
     r"'x' has shape \[4, 6\] but 'out' has \[6, 4\]; an elementwise op keeps the shape"),
    ("transpose", lambda r: r.infer_forward(spec([4, 6], [-1, -1])),
     r"attribute 'perm' must be a list of ints, got None"),
    ("softmax", lambda r: r.infer_forward(spec([4, 6], [-1, -1]), 2),
     r"axis 2 is out of range for 'x' of rank 2"),
    ("full", lambda r: r.infer_forward(), r"attribute 'shape' must be a list of ints, got None"),
    ("full_like", lambda r: r.infer_reverse(spec([4, 6], [-1, -1]), spec([4], [-1])),
     r"'out' has rank 1 but the op's notation gives it 2 dims"),
    ("sum", lambda r: r.infer_reverse(spec([4, 6], [-1, -1]), spec([4], [-1]), [0]),
     r"'out' has shape \[4\] but reducing 'x' of shape \[4, 6\] over dims \[0\]"),
    ("reduce_base", lambda r: r.infer_forward(spec([4, 6], [-1, -1]), [0], False, 9),
     r"reduce_type 9 is not a reduce type"),
    ("layer_norm", lambda r: r.infer_forward(spec([4, 6], [-1, -1]), spec([], []), None, 1e-5, 1),
     r"'scale' has shape \[\] but must be 1-D of size 6"),
])
def test_bad_calls_get_a_typed_error_naming_the_tensor_and_the_fix(op: str, call: object,
                                                                   message: str) -> None:
    with pytest.raises(RuleArgumentError, match=rf"^{op}: .*{message}"):
        call(sr.get_rule(op))  # type: ignore[operator]


def test_a_zero_dim_scale_reads_as_absent_in_layer_norm_s_reverse_only() -> None:
    x, out = spec([4, 6], [0, 1]), spec([4, 6], [0, 1])
    stats = [spec([4], [0]), spec([4], [0])]
    info = sr.get_rule("layer_norm").infer_reverse(x, spec([], []), None, out, *stats, 1e-5, 1)
    assert dms(info)[0] == [([0, -1], {}), ([], {}), None]
