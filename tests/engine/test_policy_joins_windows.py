"""The Policy fields that moved concat_split, embedding, cross_entropy, generic, pool and upsample
onto descriptions (issue 25 item 3): ``align``, ``summands``, ``shared_mesh_dim``, ``refused``,
``windows``, and ``register_described``'s flat list outputs and ``sides``. Each is tried on the
engine directly, then through the family that uses it, with the bad inputs a user can give."""

from __future__ import annotations

import pytest

import spmdrules as sr
from spmdrules.core.errors import RuleArgumentError, ShardingConflictError, UnsupportedError
from spmdrules.engine.align import align
from spmdrules.engine.description import Description, infer_forward, infer_reverse
from spmdrules.engine.policy import LINEAR_REDUCTIONS, Policy
from spmdrules.engine.windows import Windowed, geometry

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])


def spec(shape: list[int], mapping: list[int], partial: dict[int, str] | None = None
         ) -> sr.TensorSpec:
    return sr.TensorSpec(shape, sr.DistAttr(MESH, mapping, partial or {}))


def dm(a: object) -> object:
    if isinstance(a, tuple):
        return [dm(x) for x in a]
    assert isinstance(a, sr.DistAttr)
    return (list(a.dims_mapping), dict(a.partial_items)) if a.partial_items \
        else list(a.dims_mapping)


# ---- align: the pieces of a join, by cost -------------------------------------------------------
def test_align_gives_a_disputed_mesh_dim_to_the_cheapest_axis() -> None:
    # x[0] shards dim 0 on mesh dim 0, x[1] dim 1: neither agrees; dim 1 of x[1] is cheaper to
    # keep (x[0] moves its elements once), ties go to the lowest axis
    pieces = [spec([8, 4], [0, -1]), spec([8, 4], [-1, 0])]
    assert align(pieces, [0, 1]) == (((0,), ()), ())
    # the shared linear pending result passes, a max does not
    same = [spec([8, 4], [-1, -1], {1: "sum"}), spec([8, 4], [-1, 0], {1: "sum"})]
    assert align(same, [0, 1])[1] == ((1, "sum"),)
    maxed = [spec([8, 4], [-1, -1], {1: "max"}), spec([8, 4], [-1, 0], {1: "max"})]
    assert align(maxed, [0, 1])[1] == ()


def test_an_aligned_description_reads_every_tensor_off_the_aligned_pieces() -> None:
    desc = Description(("ab",), ("ab",), claimed=frozenset("a"), policy=Policy(align=True))
    got = infer_forward(desc, [(spec([4, 6], [0, 1], {}), spec([2, 6], [1, -1]))])
    # dim 0 is the claimed axis (never kept); both mesh dims are disputed: the first takes
    # dim 1, the only aligned axis, and the second finds it taken
    assert dm(got.inputs[0]) == [[-1, 0], [-1, 0]] and dm(got.outputs[0]) == [-1, 0]
    with pytest.raises(RuleArgumentError, match="one list"):
        infer_forward(Description(("ab",), ("ab",), policy=Policy(align=True)),
                      [spec([4, 6], [0, 1])])


def test_concat_and_stack_align_through_the_engine() -> None:
    x = (spec([4, 6], [0, -1]), spec([4, 6], [-1, 0]))
    info = sr.get_rule("concat").infer_forward(list(x), axis=0)
    assert dm(info.inputs[0]) == [[-1, 0], [-1, 0]] and dm(info.outputs[0]) == [-1, 0]
    info = sr.get_rule("stack").infer_forward(list(x), axis=1)
    assert dm(info.outputs[0]) == [0, -1, -1]


# ---- summands: add_n ----------------------------------------------------------------------------
def test_summands_pass_a_pending_result_only_when_every_summand_has_it() -> None:
    desc = Description(("ab",), ("ab",), linear=(0,),
                       policy=Policy(summands=True, linear_types=LINEAR_REDUCTIONS))
    both = (spec([4, 6], [0, -1], {1: "sum"}), spec([4, 6], [-1, -1], {1: "sum"}))
    got = infer_forward(desc, [both])
    assert dm(got.outputs[0]) == ([0, -1], {1: "sum"})
    assert dm(got.inputs[0]) == [([0, -1], {1: "sum"})] * 2
    one = (spec([4, 6], [0, -1], {1: "sum"}), spec([4, 6], [-1, -1]))
    assert dm(infer_forward(desc, [one]).outputs[0]) == [0, -1]
    maxed = (spec([4, 6], [-1, -1], {1: "max"}),) * 2
    assert dm(infer_forward(desc, [maxed]).outputs[0]) == [-1, -1]
    with pytest.raises(ShardingConflictError, match="inputs"):
        sr.get_rule("add_n").infer_forward([spec([4, 6], [0, -1]), spec([4, 6], [1, -1])])


# ---- shared_mesh_dim and refused: embedding, cross entropy ----------------------------------------
LOOKUP = Description(("ab", "jk"), ("abk",), names=("x", "weight", "out"),
                     policy=Policy(shared_mesh_dim="error",
                                   refused=((1, "j", "the kernel cannot split rows here"),)))


def test_a_mesh_dim_on_two_letters_is_refused_naming_both_tensors() -> None:
    with pytest.raises(ShardingConflictError, match=r"mesh dim 0 shards both 'x' dim 0 and "
                       r"'weight' dim 1"):
        infer_forward(Description(("ab", "jk"), ("abk",), names=("x", "weight", "out"),
                                  policy=Policy(shared_mesh_dim="error")),
                      [spec([2, 3], [0, -1]), spec([8, 4], [-1, 0])])
    # the default gives it to the first letter
    got = infer_forward(Description(("ab", "jk"), ("abk",)),
                        [spec([2, 3], [0, -1]), spec([8, 4], [-1, 0])])
    assert dm(got.outputs[0]) == [0, -1, -1]


def test_a_refused_letter_is_refused_only_on_its_input() -> None:
    with pytest.raises(UnsupportedError, match=r"'weight' dim 0 is sharded on mesh dims \[1\], "
                       "but the kernel cannot split rows here; replicate weight dim 0"):
        infer_forward(LOOKUP, [spec([2, 3], [-1, -1]), spec([8, 4], [1, -1])])
    # unsplit, the call goes through: the rows are whole, the rest merges
    got = infer_forward(LOOKUP, [spec([2, 3], [0, -1]), spec([8, 4], [-1, 1])])
    assert dm(got.outputs[0]) == [0, -1, 1]
    # a soft label's class split is gathered (claimed), x's refused
    ce = sr.get_rule("cross_entropy_with_softmax")
    info = ce.infer_forward(spec([4, 8], [-1, -1]), spec([4, 8], [0, 1]), soft_label=True)
    assert dm(info.inputs[1]) == [0, -1]
    with pytest.raises(UnsupportedError, match="soft_label=True"):
        ce.infer_forward(spec([4, 8], [-1, 1]), spec([4, 8], [-1, -1]), soft_label=True)


def test_embedding_row_split_is_pending_and_refused_with_padding() -> None:
    rule = sr.get_rule("embedding")
    info = rule.infer_forward(spec([2, 3], [0, -1]), spec([8, 4], [1, -1]))
    assert dm(info.outputs[0]) == ([0, -1, -1], {1: "sum"})
    with pytest.raises(UnsupportedError, match="padding_idx=3"):
        rule.infer_forward(spec([2, 3], [0, -1]), spec([8, 4], [1, -1]), padding_idx=3)
    with pytest.raises(RuleArgumentError, match="padding_idx 9 is not a row"):
        rule.infer_forward(spec([2, 3], [0, -1]), spec([8, 4], [-1, -1]), padding_idx=9)
    # c_embedding names x first in the conflict, as embedding does
    with pytest.raises(ShardingConflictError, match="'x' dim 0 and 'weight' dim 0"):
        sr.get_rule("c_embedding").infer_forward(spec([8, 4], [0, -1]), spec([2, 3], [0, -1]))


# ---- windows: pool and upsample ---------------------------------------------------------------------
def test_windows_end_a_short_split_refuse_a_far_one_and_raise_their_refusal_only_when_split(
) -> None:
    g = geometry("pool2d", [8, 8], [2, 2], {"strides": [2, 2], "paddings": [0, 0]})
    w = Windowed("pool2d", "x", "cd", (2, 3), (8, 8), g.out_lengths, g.windows)
    desc = Description(("abcd",), ("abcd",), policy=Policy(windows=w))
    got = infer_forward(desc, [spec([2, 3, 8, 8], [-1, -1, 0, 1])])
    assert dm(got.outputs[0]) == [-1, -1, 0, 1]
    short = Windowed("pool2d", "x", "cd", (2, 3), (2, 2), (1, 1), g.windows)
    got = infer_forward(Description(("abcd",), ("abcd",), policy=Policy(windows=short)),
                        [spec([2, 3, 2, 2], [-1, -1, 0, -1])])
    assert dm(got.outputs[0]) == [-1, -1, -1, -1]  # a 1-long output: the split ends
    refusing = Windowed("pool2d", "x", "cd", (2, 3), (8, 8), (8, 8), refusal="bad attributes")
    desc = Description(("abcd",), ("abcd",), policy=Policy(windows=refusing))
    assert dm(infer_forward(desc, [spec([2, 3, 8, 8], [0, -1, -1, -1])]).outputs[0]) == \
        [0, -1, -1, -1]
    with pytest.raises(RuleArgumentError, match="bad attributes"):
        infer_forward(desc, [spec([2, 3, 8, 8], [-1, -1, 0, -1])])


def test_pool_and_interpolation_read_through_their_windows_both_ways() -> None:
    pool = sr.get_rule("pool2d")
    x = spec([2, 3, 8, 8], [0, -1, 1, -1])
    info = pool.infer_forward(x, kernel_size=[2, 2], strides=[2, 2])
    assert dm(info.outputs[0]) == [0, -1, 1, -1]
    # a window wider than the neighbouring block is refused, with the dim
    four = sr.ProcessMesh([0, 1, 2, 3])
    with pytest.raises(RuleArgumentError, match=r"'x' dim 2 .* cut in 4 blocks"):
        pool.infer_forward(sr.TensorSpec([2, 3, 8, 8], sr.DistAttr(four, [-1, -1, 0, -1])),
                           kernel_size=[7, 7], strides=[1, 1], paddings=[3, 3])
    # a bad pooling_type matters only to a spatial split
    assert dm(pool.infer_forward(spec([2, 3, 8, 8], [0, -1, -1, -1]), kernel_size=[2, 2],
                                 pooling_type="min").outputs[0]) == [0, -1, -1, -1]
    with pytest.raises(RuleArgumentError, match="pooling_type 'min'"):
        pool.infer_forward(x, kernel_size=[2, 2], pooling_type="min")
    # global pooling: the spatial split is pending in forward, kept on out in reverse
    info = pool.infer_forward(x, global_pooling=True, pooling_type="avg")
    assert dm(info.outputs[0]) == ([0, -1, -1, -1], {1: "sum"})
    out = spec([2, 3, 1, 1], [0, -1, -1, 1])
    assert dm(pool.infer_reverse(x, out, global_pooling=True).inputs[0]) == [0, -1, -1, -1]
    up = sr.get_rule("nearest_interp")
    info = up.infer_forward(spec([2, 3, 4, 4], [-1, -1, 0, -1]), scale=[2.0, 2.0])
    assert dm(info.outputs[0]) == [-1, -1, 0, -1]
    with pytest.raises(RuleArgumentError, match="spatial lengths"):
        up.infer_reverse(spec([2, 3, 4, 4], [-1, -1, -1, -1]), spec([2, 3, 4, 4], [-1] * 4),
                         scale=[2.0, 2.0])


# ---- register_described: list outputs flat, and (ins, outs) sides ----------------------------------
def test_a_list_output_answers_flat_and_reverse_reads_its_pieces() -> None:
    split = sr.get_rule("split")
    x = spec([4, 6], [0, 1])
    info = split.infer_forward(x, sections=[1, 3], axis=0)
    assert [dm(a) for a in info.outputs] == [[-1, 1], [-1, 1]]
    outs = [spec([1, 6], [-1, 1]), spec([3, 6], [0, -1])]
    with pytest.raises(ShardingConflictError, match="'outs\\[1\\]' dim 1"):
        split.infer_reverse(x, [spec([1, 6], [-1, 1]), spec([3, 6], [-1, 0])],
                            sections=[1, 3], axis=0)
    info = split.infer_reverse(x, outs, sections=[1, 3], axis=0)
    assert dm(info.inputs[0]) == [-1, 1] and len(info.outputs) == 2
    with pytest.raises(RuleArgumentError, match="'outs' holds 1 tensors"):
        split.infer_reverse(x, outs[:1], sections=[1, 3], axis=0)


def test_generic_rules_answer_each_list_as_a_side() -> None:
    ins = [spec([4, 6], [0, 1], {}), spec([], [])]
    outs = [spec([4, 2, 2], [-1, 1, -1])]
    info = sr.get_rule("default_data_parallel").infer_forward(ins, outs)
    assert [dm(a) for a in info.inputs] == [[0, -1], []]
    assert [dm(a) for a in info.outputs] == [[0, -1, -1]]
    info = sr.get_rule("default_data_parallel").infer_reverse(ins, outs)
    assert [dm(a) for a in info.inputs] == [[-1, -1], []]
    info = sr.get_rule("replicated").infer_forward(ins, outs)
    assert [dm(a) for a in info.outputs] == [[-1, -1, -1]]
    with pytest.raises(RuleArgumentError, match="'ins' is an empty list"):
        sr.get_rule("default_").infer_forward([], outs)
    with pytest.raises(RuleArgumentError, match="both empty"):
        sr.get_rule("replicated").infer_reverse([], [])
    with pytest.raises(ShardingConflictError):
        sr.get_rule("default_").infer_forward([spec([4], [0]), spec([4], [1])], outs)


def test_reverse_of_a_claimed_letter_merges_then_drops_it() -> None:
    desc = Description(("ab",), ("ab", "ab"), claimed=frozenset("a"))
    got = infer_reverse(desc, [spec([4, 6], [-1, -1])],
                        [spec([2, 6], [0, -1]), spec([2, 6], [-1, 0])])
    # mesh dim 0 went to the op axis first: b keeps nothing of it
    assert dm(got.inputs[0]) == [-1, -1]
