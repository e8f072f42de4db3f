"""The engine's product policy (spmdrules.engine.contraction): matmul and bmm are descriptions
whose forward and reverse the engine derives, each policy field decides what it names, and bad
calls are refused by name."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from spmdrules.rules import matmul as matmul_rules

from spmdrules import DistAttr, ProcessMesh, SpmdInfo, TensorSpec, get_rule
from spmdrules.core.errors import RuleArgumentError, SpmdError
from spmdrules.engine import contraction
from spmdrules.engine.contraction import Contraction, swap_last2, swapped_letters
from spmdrules.engine.description import Description, infer_forward, infer_reverse
from spmdrules.execution.kernels import fused_linear as fused_linear_kernels
from spmdrules.execution.kernels import matmul as matmul_kernels
from spmdrules.execution.vjp import fused_linear as fused_linear_vjps
from spmdrules.execution.vjp import matmul as matmul_vjps

MESH = ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])


def spec(shape: Sequence[int], dm: Sequence[int], partial: Any = None,
         masks: Any = None) -> TensorSpec:
    return TensorSpec(list(shape), DistAttr(MESH, list(dm), partial, masks=masks))


def maps(info: SpmdInfo) -> list[str]:
    """Every attribute's mapping, a list argument's one by one."""
    slots = [b for a in (*info.inputs, *info.outputs) for b in (a if isinstance(a, tuple) else (a,))]
    return [a.mapping_str() for a in slots if isinstance(a, DistAttr)]


# ---- the family is described ---------------------------------------------------------------------
@pytest.mark.parametrize("op, describe", [("matmul", matmul_rules.describe_matmul),
                                          ("matmul_v2", matmul_rules.describe_matmul),
                                          ("bmm", matmul_rules.describe_bmm)])
def test_the_products_are_descriptions_whose_directions_the_engine_derives(
        op: str, describe: Any) -> None:
    rule = get_rule(op)
    # the registered entry points are register_described's, leading to the family's description
    for binding in (rule._fwd, rule._rev):
        if binding is None:
            continue
        assert binding.fn.__qualname__.startswith("register_described.")
        assert inspect.unwrap(binding.fn) is describe
    d = describe((4, 6, 8), (4, 8, 5))
    assert d.contraction == matmul_rules.PRODUCT and d.inputs == ("amk", "akn")


def test_trans_flags_are_the_stored_letters_not_a_second_merge() -> None:
    d = matmul_rules.describe_matmul((8, 6), (5, 8), trans_x=True, trans_y=True)
    assert (d.inputs, d.outputs) == (("km", "nk"), ("mn",))
    assert d.contraction is not None and d.contraction.reverse_swapped == (True, True)
    # a vector has nothing to swap
    assert swapped_letters("k", True) == "k"


# ---- each policy field ---------------------------------------------------------------------------
def test_keep_uneven_keeps_an_uneven_batch_letter_and_paddle_even_replicates_it() -> None:
    x, y = spec([3, 6, 4], [0, -1, -1]), spec([3, 4, 5], [-1, -1, -1])
    assert maps(matmul_rules.matmul_forward(x, y, False, False)) == ["[0,-1,-1]"] * 3
    assert maps(matmul_rules.matmul_forward(x, y, False, False, even=True)) == ["[-1,-1,-1]"] * 3
    assert matmul_rules.PRODUCT.paddle_even() == dataclasses.replace(matmul_rules.PRODUCT,
                                                                     keep_uneven=False)


def test_coshard_splits_a_letter_over_both_claims_and_without_it_the_first_claim_wins() -> None:
    xl, yl, ol = "amk", "akn", "amn"
    xm, ym = ((0,), (), ()), ((1,), (), ())
    on = contraction.contract(Contraction(), xl, (4, 6, 4), xm, yl, (4, 4, 5), ym, ol, (2, 2))
    assert on[2] == ((0, 1), (), ())
    off = contraction.contract(Contraction(coshard=False), xl, (4, 6, 4), xm, yl, (4, 4, 5), ym,
                               ol, (2, 2))
    assert off[2] == ((0,), (), ())


def test_the_claim_order_gives_a_contested_mesh_dim_to_the_larger_free_letter() -> None:
    n_larger = matmul_rules.matmul_forward(spec([6, 4], [0, -1]), spec([4, 8], [-1, 0]),
                                           False, False)
    m_larger = matmul_rules.matmul_forward(spec([8, 4], [0, -1]), spec([4, 6], [-1, 0]),
                                           False, False)
    assert maps(n_larger) == ["[-1,-1]", "[-1,0]", "[-1,0]"]
    assert maps(m_larger) == ["[0,-1]", "[-1,-1]", "[0,-1]"]


def test_the_free_letters_are_never_checked_for_divisibility() -> None:
    info = matmul_rules.matmul_forward(spec([7, 4], [0, -1]), spec([4, 5], [-1, 1]), False, False,
                                       even=True)
    assert maps(info) == ["[0,-1]", "[-1,1]", "[0,1]"]
    # with m and n not free, Paddle's even policy replicates both
    strict = dataclasses.replace(matmul_rules.PRODUCT.paddle_even(), free=frozenset())
    got = contraction.contract(strict, "mk", (7, 4), ((0,), ()), "kn", (4, 5), ((), (1,)), "mn",
                               (2, 2))
    assert got[2] == ((), ())


def test_reverse_swapped_reads_size_one_dims_through_the_swapped_shape_as_paddle_does() -> None:
    # x is stored [1, 8] with trans_x: its m (stored dim 1, size 8) is read against size 1
    x, y, out = spec([1, 8], [-1, -1]), spec([1, 4], [-1, -1]), spec([8, 4], [0, -1])
    assert maps(matmul_rules.matmul_reverse(x, y, out, True, False)) == ["[-1,-1]"] * 3
    # the same product stored untransposed keeps m's shard
    x = spec([8, 1], [-1, -1])
    assert maps(matmul_rules.matmul_reverse(x, y, out, False, False)) == ["[0,-1]", "[-1,-1]",
                                                                          "[0,-1]"]


def test_the_public_forward_equals_the_registered_rule_on_masked_sums() -> None:
    """On ead71a4 ``matmul_forward`` dropped the masks that the registered rule carries."""
    x = spec([6, 4], [0, -1], {1: "sum"}, {1: 0})
    y = spec([4, 5], [-1, -1])
    ours = matmul_rules.matmul_forward(x, y, False, False)
    assert ours == get_rule("matmul").infer_forward(x, y)
    assert maps(ours)[-1] == "[0,-1] P{1:sum masked by dim 0}"


# ---- one swap_last2 ------------------------------------------------------------------------------
def test_swap_last2_is_one_function_for_shapes_letters_and_arrays() -> None:
    for module in (matmul_kernels, fused_linear_kernels, fused_linear_vjps, matmul_vjps):
        assert module.swap_last2 is swap_last2
    assert not hasattr(matmul_rules, "_swap_last2")
    assert swap_last2((2, 3, 4), True) == (2, 4, 3)
    assert swap_last2((5,), True) == (5,)
    assert swap_last2(np.zeros((2, 3)), True).shape == (3, 2)
    assert swap_last2(np.zeros(3), True).shape == (3,)
    assert swap_last2(np.zeros(()), True).shape == ()


# ---- hostile calls -------------------------------------------------------------------------------
@pytest.mark.parametrize("x, y, kw, match", [
    ((), (4,), {}, r"rank >= 1"),
    ((4,), (4, 5), {"trans_x": True}, r"trans_x=True needs 'x' of rank >= 2"),
    ((4, 6), (5, 3), {}, r"contracted dim of 'x' has size 6 but 'y'"),
    ((3, 4, 6), (2, 6, 5), {}, r"do not broadcast"),
])
def test_a_bad_product_is_refused_by_name(x: tuple[int, ...], y: tuple[int, ...],
                                          kw: dict[str, bool], match: str) -> None:
    args = [spec(x, [-1] * len(x)), spec(y, [-1] * len(y))]
    with pytest.raises(RuleArgumentError, match=match):
        get_rule("matmul").infer_forward(*args, **kw)


@pytest.mark.parametrize("x, y, out, match", [
    ((6,), (2, 6, 5), (2, 5), r"'out' has rank 2 but the reverse rule needs rank"),
    ((4, 6), (6, 5), (4, 7), r"'out' has shape \[4, 7\] but the product of 'x' and 'y'"),
    ((4, 6), (6, 5), (2, 4, 5), r"'out' has rank 3 but the reverse rule needs rank"),
])
def test_a_bad_reverse_product_is_refused_by_name(x: tuple[int, ...], y: tuple[int, ...],
                                                  out: tuple[int, ...], match: str) -> None:
    args = [spec(s, [-1] * len(s)) for s in (x, y, out)]
    with pytest.raises(RuleArgumentError, match=match):
        get_rule("matmul").infer_reverse(*args)


def test_a_contraction_with_other_than_two_operands_is_refused() -> None:
    desc = Description(("ab", "bc", "cd"), ("ad",), contraction=Contraction())
    a = spec([4, 4], [-1, -1])
    with pytest.raises(RuleArgumentError, match="two tensors in and one out"):
        infer_forward(desc, (a, a, a))
    with pytest.raises(RuleArgumentError, match="a product takes 3 tensors"):
        infer_reverse(Description(("ab", "bc"), ("ac",), contraction=Contraction()),
                      (a, None), (a,))


def test_bmm_refuses_what_matmul_would_broadcast() -> None:
    with pytest.raises(RuleArgumentError, match=r"bmm: 'x' has batch size 4 but 'y' has 2"):
        get_rule("bmm").infer_forward(spec([4, 3, 5], [-1] * 3), spec([2, 5, 6], [-1] * 3))


# ---- einsum: the plain merge with Paddle's reading of the operands -------------------------------
def test_einsum_is_a_description_with_paddles_reading() -> None:
    from spmdrules.rules import einsum_op

    rule = get_rule("einsum")
    assert inspect.unwrap(rule._fwd.fn) is einsum_op.describe_einsum
    d = einsum_op.describe_einsum(((4, 4), (4, 5)), equation="ii,ij->j")
    assert d.whole == frozenset("i") and d.reading == einsum_op.READING


def test_major_only_reads_a_co_sharded_dim_as_its_major_mesh_dim() -> None:
    x = TensorSpec([8, 4], DistAttr(MESH, multi_dims_mapping=[[0, 1], []]))
    y = spec([4, 6], [-1, -1])
    info = get_rule("einsum").infer_forward([x, y], equation="ij,jk->ik")
    assert maps(info) == ["[0,-1]", "[-1,-1]", "[0,-1]"]
    reading = contraction.OperandReading(major_only=False, outer_yields=False)
    assert reading.read([("ij", ((0, 1), ()))], "ij") == [("ij", ((0, 1), ()))]


def test_outer_yields_reads_the_second_sharded_factor_as_replicated() -> None:
    x, y = spec([4], [0]), spec([6], [1])
    info = get_rule("einsum").infer_forward([x, y], equation="i,j->ij")
    assert maps(info) == ["[0]", "[-1]", "[0,-1]"]
    plain = contraction.OperandReading(major_only=True, outer_yields=False)
    assert plain.read([("i", ((0,),)), ("j", ((1,),))], "ij")[1] == ("j", ((1,),))


@pytest.mark.parametrize("shapes, equation, match", [
    ((), "->", r"einsum needs at least one tensor in 'inputs'"),
    (((4, 5),), "ijk->i", r"'inputs\[0\]' has rank 2 but the equation gives it 3 letters"),
    (((4, 5), (6, 7)), "ij,jk->ik", r"letter 'j' is 'inputs\[1\]' dim 0 of size 6"),
    (((4,), (4,), (4,)), "i,i,i->i", r"at most 2 operands"),
    (((4,),), "i->i,i", r"has 2 outputs; write exactly one"),
])
def test_a_bad_einsum_is_refused_by_name(shapes: tuple[tuple[int, ...], ...], equation: str,
                                         match: str) -> None:
    args = [spec(s, [-1] * len(s)) for s in shapes]
    with pytest.raises(Exception, match=match) as info:
        get_rule("einsum").infer_forward(args, equation=equation)
    assert isinstance(info.value, SpmdError)
