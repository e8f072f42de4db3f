"""The Einsum engine's primitives."""

from __future__ import annotations

import pytest

from spmdrules import RuleArgumentError, ShardingConflictError
from spmdrules.engine import einsum


def test_parse_and_errors_point_at_the_character() -> None:
    n = einsum.parse("bmk,bkn->bmn")
    assert n.inputs == ("bmk", "bkn") and n.outputs == ("bmn",)
    assert n.contracted == frozenset("k")
    with pytest.raises(RuleArgumentError) as e:
        einsum.parse("ij,jk->iz")
    assert "output letter 'z' does not appear in any input" in str(e.value)
    *_, notation, caret = str(e.value).splitlines()  # continuation lines are indented alike
    assert notation.endswith("ij,jk->iz") and caret == " " * (len(notation) - 1) + "^"
    with pytest.raises(RuleArgumentError, match="missing '->'"):
        einsum.parse("abc,cd")
    with pytest.raises(RuleArgumentError, match="ellipsis"):
        einsum.parse("...i->i")


def test_broadcast_notations() -> None:
    assert einsum.broadcast_notations([(8, 1, 4), (3, 4)]) == (("a1c", "bc"), "abc")
    assert einsum.broadcast_notations([(1, 4), (9, 16, 4)]) == (("1c", "abc"), "abc")
    assert einsum.broadcast_notations([(1,), (1,)]) == (("a", "a"), "a")


def test_merge_policies() -> None:
    ops = [("ij", ((0,), ())), ("jk", ((1,), ()))]
    with pytest.raises(ShardingConflictError, match="axis 'j'"):
        einsum.merge([("ij", ((), (0,))), ("jk", ((1,), ()))], names=("x", "y"))
    assert einsum.merge(ops) == {"i": (0,), "j": (1,)}
    co = einsum.merge([("ij", ((), (0,))), ("jk", ((2,), ()))], on_axis_conflict="coshard")
    assert co == {"j": (0, 2)}
    first = einsum.merge([("ij", ((), (0,))), ("jk", ((2,), ()))], on_axis_conflict="first")
    assert first == {"j": (0,)}


def test_replicated_yields_and_first_sharded_keeps_mesh_dim() -> None:
    # add x[8,12]dm[-1,0] + y[6,8,12]dm[1,0,-1]: mesh 0 reaches 'c' first (x), then 'b' (y).
    letters = einsum.merge([("bc", ((), (0,))), ("abc", ((1,), (0,), ()))])
    resolved = einsum.resolve_mesh_conflicts(letters)
    assert einsum.mapping_for("abc", resolved) == ((1,), (), (0,))
    assert einsum.resolve_mesh_conflicts({"m": (0,), "n": (0,)}, priority="nm") == {
        "m": (),
        "n": (0,),
    }


def test_partial_and_divisibility() -> None:
    letters = {"m": (0,), "k": (1, 2)}
    operands = [("mk", ((0,), (1, 2))), ("kn", ((1, 2), ()))]
    assert einsum.contracted_partial(operands, "mn") == ((1, "sum"), (2, "sum"))
    assert einsum.contracted_partial(operands, "mn", "max") == ((1, "max"), (2, "max"))
    assert einsum.drop_indivisible(letters, {"m": 7, "k": 8}, (2, 2, 2)) == {"m": (), "k": (1, 2)}
    assert einsum.letter_sizes([("mk", (1, 8)), ("kn", (8, 5)), ("mn", (7, 5))]) == {
        "m": 7,
        "k": 8,
        "n": 5,
    }


def test_size_one_dims_are_replicated() -> None:
    assert einsum.mapping_for("abc", {"a": (0,), "c": (1,)}, shape=(1, 3, 4)) == ((), (), (1,))


def test_a_contracted_letter_the_operands_drop_leaves_no_pending_sum() -> None:
    """Issue 23 item 10: k of size 1 merged on mesh dim 0 is replicated in both operands (nothing
    to split), so every rank's product is the whole one: no pending sum may come of it."""
    lm = einsum.merge([("mk", ((), (0,))), ("nk", ((), (0,)))])
    assert lm == {"k": (0,)}
    operands = [("mk", einsum.mapping_for("mk", lm, (12, 1))),
                ("nk", einsum.mapping_for("nk", lm, (3, 1)))]
    assert operands == [("mk", ((), ())), ("nk", ((), ()))]
    assert einsum.contracted_partial(operands, "mn") == ()
    # a k that one operand really splits (a broadcast partner holds it whole) is pending
    assert einsum.contracted_partial([("mk", ((), (0,))), ("k", ((),))], "m") == ((0, "sum"),)
