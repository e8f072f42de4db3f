"""The DimTrans family (reshape, reshape2, flatten, squeeze, unsqueeze, unsqueeze2): hand-written
cases, Paddle's quirks, typed errors, and execution proofs of the deviation classes in
docs/deviations/shape.md."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from spmdrules import DistAttr, ProcessMesh, SpmdInfo, TensorSpec, get_rule
from spmdrules.conformance.calls import agrees, call_engine
from spmdrules.conformance.deviation import classify
from spmdrules.conformance.runner import default_case_paths, iter_cases
from spmdrules.core.errors import RuleArgumentError, SpmdError
from spmdrules.core.shards import ShardMismatch, gather, scatter, shard_slices

Array = np.ndarray[Any, Any]

MESH22 = ProcessMesh.from_shape([2, 2], list(range(4)))
MESH24 = ProcessMesh.from_shape([2, 4], list(range(8)))
MESH124 = ProcessMesh.from_shape([1, 2, 4], list(range(8)))
MESH222 = ProcessMesh.from_shape([2, 2, 2], list(range(8)))


def spec(mesh: ProcessMesh, shape: Sequence[int], dm: Sequence[Any], partial: Any = None
         ) -> TensorSpec:
    if any(isinstance(d, list) for d in dm):
        attr = DistAttr(mesh, multi_dims_mapping=[d if isinstance(d, list) else ([] if d == -1
                        else [d]) for d in dm], partial=partial)
    else:
        attr = DistAttr(mesh, list(dm), partial)
    return TensorSpec(list(shape), attr)


def maps(info: SpmdInfo) -> tuple[list[str], list[str]]:
    return (
        [a.mapping_str() for a in info.inputs if isinstance(a, DistAttr)],
        [a.mapping_str() for a in info.outputs if isinstance(a, DistAttr)],
    )


def fwd(op: str, *args: Any) -> tuple[list[str], list[str]]:
    return maps(get_rule(op).infer_forward(*args))


def rev(op: str, *args: Any) -> tuple[list[str], list[str]]:
    return maps(get_rule(op).infer_reverse(*args))


# ---- reshape ------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["reshape", "reshape2"])
def test_reshape_benchmark_case_keeps_both_shards(op: str) -> None:
    x = spec(MESH24, [8, 128, 1024], [0, -1, 1])
    assert fwd(op, x, [8, 128, 16, 64]) == (["[0,-1,1]"], ["[0,-1,1,-1]"])


def test_reshape_quirk10_and_co_shard() -> None:
    assert fwd("reshape", spec(MESH22, [7, 5], [0, 1]), [-1]) == (["[-1,-1]"], ["[-1]"])
    assert fwd("reshape", spec(MESH22, [6], [0]), [3, 2]) == (["[-1]"], ["[-1,-1]"])
    assert fwd("reshape", spec(MESH22, [32], [0]), [8, 4]) == (["[0]"], ["[0,-1]"])
    assert fwd("reshape", spec(MESH22, [8, 4], [0, 1]), [32]) == (["[[0,1],-1]"], ["[[0,1]]"])
    assert fwd("reshape", spec(MESH22, [8, 4], [-1, 1]), [32]) == (["[-1,-1]"], ["[-1]"])


def test_reshape_partial_passes_through_both_directions() -> None:
    x = spec(MESH22, [8, 6], [0, -1], {1: "sum"})
    assert fwd("reshape", x, [8, 2, 3]) == (["[0,-1] P{1:sum}"], ["[0,-1,-1] P{1:sum}"])
    out = spec(MESH22, [8, 2, 3], [0, -1, -1], {1: "sum"})
    # x pends the same reduction as out (Paddle keeps x's own status: a deviation)
    assert rev("reshape", spec(MESH22, [8, 6], [-1, -1]), out, [8, 2, 3]) == (
        ["[0,-1] P{1:sum}"], ["[0,-1,-1] P{1:sum}"]
    )


def test_reshape_reverse_reads_the_input_off_the_output() -> None:
    x = spec(MESH22, [8, 8, 8], [-1, -1, -1])
    out = spec(MESH22, [64, 8], [[0, 1], -1])
    assert rev("reshape", x, out, [64, 0]) == (["[[0,1],-1,-1]"], ["[[0,1],-1]"])


def test_reshape_errors_name_the_problem() -> None:
    x = spec(MESH22, [4, 6], [0, -1])
    with pytest.raises(RuleArgumentError, match=r"^reshape: .*only one size can be inferred"):
        get_rule("reshape").infer_forward(x, [-1, -1])
    with pytest.raises(RuleArgumentError, match=r"'out' has shape \[6, 4\]"):
        get_rule("reshape").infer_reverse(x, spec(MESH22, [6, 4], [-1, -1]), [24])
    with pytest.raises(RuleArgumentError, match="shape"):
        get_rule("reshape").infer_forward(x)


# ---- flatten ------------------------------------------------------------------------------------
def test_flatten_forward_is_a_reshape_and_keeps_partial() -> None:
    x = spec(MESH22, [4, 6, 8], [0, 1, -1])
    assert fwd("flatten", x, 0, 1) == (["[[0,1],-1,-1]"], ["[[0,1],-1]"])
    assert fwd("flatten", x, 1, -1) == (["[0,1,-1]"], ["[0,1]"])
    xp = spec(MESH22, [4, 6], [-1, -1], {0: "sum"})
    assert fwd("flatten", xp, 0, -1) == (["[-1,-1] P{0:sum}"], ["[-1] P{0:sum}"])


def test_flatten_reverse_splits_the_merged_dim_and_gives_x_out_s_partial() -> None:
    x = spec(MESH22, [4, 6, 8], [-1, -1, -1], {0: "sum"})
    out = spec(MESH22, [24, 8], [0, 1])
    assert rev("flatten", x, out, 0, 1) == (["[0,-1,1]"], ["[0,1]"])
    # a pending sum on out is what the local flatten of an equally pending x makes (Paddle drops
    # both: shape-op-keeps-partial)
    out_p = spec(MESH22, [24, 8], [0, -1], {1: "sum"})
    assert rev("flatten", x, out_p, 0, 1) == (["[0,-1,-1] P{1:sum}"], ["[0,-1] P{1:sum}"])


def test_flatten_bad_axes() -> None:
    x = spec(MESH22, [4, 6], [0, -1])
    with pytest.raises(RuleArgumentError, match="start_axis 1 comes after stop_axis 0"):
        get_rule("flatten").infer_forward(x, 1, 0)
    with pytest.raises(RuleArgumentError, match="axis 2 is out of range for 'x'"):
        get_rule("flatten").infer_forward(x, 0, 2)


# ---- squeeze / unsqueeze ------------------------------------------------------------------------
def test_squeeze_ignores_non_unit_axes_and_drops_unit_dim_shards() -> None:
    # squeeze/forward/0: the named axis has size 32 and stays; the sharded size-1 dim is replicated
    x = spec(MESH22, [4, 1, 32, 10], [0, 1, -1, -1])
    assert fwd("squeeze", x, [2]) == (["[0,-1,-1,-1]"], ["[0,-1,-1,-1]"])
    assert fwd("squeeze", x, []) == (["[0,-1,-1,-1]"], ["[0,-1,-1]"])
    assert fwd("squeeze", x, [-3]) == (["[0,-1,-1,-1]"], ["[0,-1,-1]"])
    out = spec(MESH22, [4, 32, 10], [-1, 1, 0])
    assert rev("squeeze", spec(MESH22, [4, 1, 32, 10], [-1, -1, -1, -1]), out, [1]) == (
        ["[-1,-1,1,0]"], ["[-1,1,0]"]
    )


def test_unsqueeze_inserts_axes_one_after_another_like_paddle_unsqueeze() -> None:
    x = spec(MESH22, [3, 5], [0, 1], {})
    assert fwd("unsqueeze", x, [1]) == (["[0,1]"], ["[0,-1,1]"])
    # [-1, 0]: -1 appends (rank 2 -> 3), then 0 prepends: out shape [1, 3, 5, 1]
    assert fwd("unsqueeze", x, [-1, 0]) == (["[0,1]"], ["[-1,0,1,-1]"])
    # [1, 1]: two new dims at 1 and 2, like paddle.unsqueeze -> [3, 1, 1, 5]
    assert fwd("unsqueeze2", x, [1, 1]) == (["[0,1]"], ["[0,-1,-1,1]"])


def test_unsqueeze_reverse_handles_negative_and_repeated_axes_quirk_e() -> None:
    # Paddle crashes (SIGSEGV) on these; we read the positions exactly as forward does
    x = spec(MESH22, [3, 5], [-1, -1])
    # [0, -2]: 0 prepends (rank 3), then -2 counts from rank 3 + 1: out shape [1, 3, 1, 5]
    out = spec(MESH22, [1, 3, 1, 5], [-1, 0, -1, 1])
    assert rev("unsqueeze", x, out, [0, -2]) == (["[0,1]"], ["[-1,0,-1,1]"])
    out2 = spec(MESH22, [3, 1, 1, 5], [0, -1, -1, 1])
    assert rev("unsqueeze", x, out2, [1, 1]) == (["[0,1]"], ["[0,-1,-1,1]"])
    with pytest.raises(RuleArgumentError, match="'out' has shape"):
        get_rule("unsqueeze").infer_reverse(x, out2, [0, -2])


def test_unsqueeze_and_squeeze_carry_partials_through_both_directions() -> None:
    # issue 24 cause 5: a pure relabelling of elements is linear, so the pending sum stays pending
    x = spec(MESH22, [3, 5], [0, -1], {1: "sum"})
    assert fwd("unsqueeze", x, [0]) == (["[0,-1] P{1:sum}"], ["[-1,0,-1] P{1:sum}"])
    assert fwd("squeeze", spec(MESH22, [3, 1], [0, -1], {1: "sum"}), []) == (
        ["[0,-1] P{1:sum}"], ["[0] P{1:sum}"])
    # every partial, of any reduce type and on several mesh dims, is carried as given
    xm = spec(MESH222, [6, 1, 4], [2, -1, -1], {0: "max", 1: "sum"})
    assert fwd("squeeze", xm, [1]) == (["[2,-1,-1] P{0:max,1:sum}"], ["[2,-1] P{0:max,1:sum}"])
    # reverse: x takes out's partial, whatever its own (a full x cannot turn into a pending out)
    out = spec(MESH22, [3, 1, 5], [0, -1, -1], {1: "sum"})
    assert rev("unsqueeze", spec(MESH22, [3, 5], [-1, -1]), out, [1]) == (
        ["[0,-1] P{1:sum}"], ["[0,-1,-1] P{1:sum}"])
    assert rev("squeeze", spec(MESH22, [3, 1, 5], [-1, -1, -1], {0: "sum"}),
               spec(MESH22, [3, 5], [-1, 0], {1: "sum"}), [1]) == (
        ["[-1,-1,0] P{1:sum}"], ["[-1,0] P{1:sum}"])
    assert rev("squeeze", spec(MESH22, [3, 1, 5], [-1, -1, -1], {0: "sum"}),
               spec(MESH22, [3, 5], [-1, 0]), [1]) == (["[-1,-1,0]"], ["[-1,0]"])


def test_unsqueeze_bad_axis() -> None:
    x = spec(MESH22, [3, 5], [0, -1])
    with pytest.raises(RuleArgumentError, match=r"^unsqueeze: axis 5 is out of range"):
        get_rule("unsqueeze").infer_forward(x, [5])
    with pytest.raises(RuleArgumentError, match="axis"):
        get_rule("unsqueeze").infer_forward(x)


def test_zero_d_input() -> None:
    x0 = spec(MESH22, [], [])
    assert fwd("reshape", x0, [1, 1]) == (["[]"], ["[-1,-1]"])
    assert fwd("flatten", x0, 0, -1) == (["[]"], ["[-1]"])
    assert fwd("unsqueeze", x0, [0]) == (["[]"], ["[-1]"])
    assert fwd("squeeze", x0, []) == (["[]"], ["[]"])
    # nothing of a 0-d x can carry the size-1 output dim's shard
    assert rev("flatten", x0, spec(MESH22, [1], [0]), 0, -1) == (["[]"], ["[-1]"])


# ---- execution proofs ---------------------------------------------------------------------------
def consistent(kernel: Callable[[Array], Array], x: Array, x_attr: DistAttr, out_attr: DistAttr
               ) -> bool:
    """Running ``kernel`` on every device's block of x (under x_attr) gives out under out_attr."""
    expect = kernel(x)
    blocks = {}
    for c, b in scatter(x, x_attr).items():
        want = tuple(s.stop - s.start for s in shard_slices(expect.shape, out_attr, c))
        if b.size != math.prod(want):
            return False
        blocks[c] = b.reshape(want)
    try:
        got = gather(blocks, expect.shape, out_attr)
    except ShardMismatch:
        return False
    return bool(np.allclose(got, expect))


def case(case_id: str) -> dict[str, Any]:
    op = case_id.split("/")[0]
    return next(c for c in iter_cases(default_case_paths(), [op]) if c["case_id"] == case_id)


def da(mesh: ProcessMesh, mdm: Sequence[Sequence[int]]) -> DistAttr:
    return DistAttr(mesh, multi_dims_mapping=mdm)


def unsqueeze_seq(axes: Sequence[int]) -> Callable[[Array], Array]:
    def kernel(b: Array) -> Array:
        for a in axes:  # paddle.unsqueeze's own order
            b = np.expand_dims(b, a if a >= 0 else a + b.ndim + 1)
        return b

    return kernel


def test_proof_unsqueeze_sequential_axes() -> None:
    # unsqueeze/forward/23: x[16,12,8] dm[0,1,-1] on mesh [2,2], axis=[2,1]; the op gives
    # [16,1,12,1,8]. Paddle's out [0,-1,-1,1,-1] shards a size-1 dim and replicates the 12.
    x = np.arange(16 * 12 * 8).reshape(16, 12, 8)
    x_attr = da(MESH22, [[0], [1], []])
    kernel = unsqueeze_seq([2, 1])
    paddle_out = da(MESH22, [[0], [], [], [1], []])
    assert not consistent(kernel, x, x_attr, paddle_out)
    info = get_rule("unsqueeze").infer_forward(spec(MESH22, [16, 12, 8], [0, 1, -1]), [2, 1])
    ours = info.outputs[0]
    assert isinstance(ours, DistAttr) and ours.mapping_str() == "[0,-1,1,-1,-1]"
    assert consistent(kernel, x, x_attr, ours)
    assert classify(case("unsqueeze/forward/23"), info) == "unsqueeze-sequential-axes"


def test_proof_unsqueeze_reverse_sequential_axes() -> None:
    # unsqueeze/reverse/19: out[12,8,1,4,1] dm[-1,-1,1,0,2] on mesh [2,2,2], axis=[3,2].
    # Paddle replicates everything; reading the axes in order keeps the 4-dim's shard on mesh 0.
    mesh = ProcessMesh.from_shape([2, 2, 2], list(range(8)))
    x = spec(mesh, [12, 8, 4], [1, 0, 2])
    out = spec(mesh, [12, 8, 1, 4, 1], [-1, -1, 1, 0, 2])
    info = get_rule("unsqueeze").infer_reverse(x, out, [3, 2])
    assert maps(info) == (["[-1,-1,0]"], ["[-1,-1,-1,0,-1]"])
    xa, oa = info.inputs[0], info.outputs[0]
    assert isinstance(xa, DistAttr) and isinstance(oa, DistAttr)
    assert consistent(unsqueeze_seq([3, 2]), np.arange(12 * 8 * 4).reshape(12, 8, 4), xa, oa)
    assert classify(case("unsqueeze/reverse/19"), info) == "unsqueeze-sequential-axes"
    # Paddle's all-replicated pair is correct too: in reverse this class is about parallelism
    assert consistent(unsqueeze_seq([3, 2]), np.arange(12 * 8 * 4).reshape(12, 8, 4),
                      DistAttr(mesh, [-1, -1, -1]), DistAttr(mesh, [-1] * 5))


@pytest.mark.parametrize(
    ("case_id", "mesh", "x_shape", "out_shape", "out_dm", "paddle_x", "paddle_out"),
    [
        # out [2,3] co-sharded over 4 devices: rows 1,1,0,0 = elements 3,3,0,0; x [6] gets 2,2,1,1
        ("reshape/reverse/68", MESH22, [6], [2, 3], [0, 1], [[0, 1]], [[0, 1], []]),
        # out dim 0 (size 2) on a mesh dim of size 3; x dim 0 (size 6) on the same mesh dim
        ("reshape/reverse/50", ProcessMesh.from_shape([3], [0, 1, 2]), [6, 4, 5, 8],
         [2, 12, 5, 8], [0, -1, -1, -1], [[0], [], [], []], [[0], [], [], []]),
    ],
)
def test_proof_reshape_reverse_unchecked_divisibility(
    case_id: str, mesh: ProcessMesh, x_shape: list[int], out_shape: list[int], out_dm: list[int],
    paddle_x: list[list[int]], paddle_out: list[list[int]],
) -> None:
    x = np.arange(math.prod(x_shape)).reshape(x_shape)

    def kernel(b: Array) -> Array:
        return b.reshape(out_shape)

    assert not consistent(kernel, x, da(mesh, paddle_x), da(mesh, paddle_out))
    info = get_rule("reshape").infer_reverse(
        spec(mesh, x_shape, [-1] * len(x_shape)), spec(mesh, out_shape, out_dm), out_shape
    )
    xa, oa = info.inputs[0], info.outputs[0]
    assert isinstance(xa, DistAttr) and isinstance(oa, DistAttr)
    assert consistent(kernel, x, xa, oa)
    c = case(case_id)
    assert classify(c, call_engine(c)) == "reshape-reverse-unchecked-divisibility"


def test_proof_reshape_reverse_partial_from_out() -> None:
    # reshape/reverse/51: x[9,9], out[3,9,3] P{1: sum} on mesh [2,4]. Paddle returns x without a
    # partial next to the partial out: each device's reshaped block is then the whole tensor, not
    # a piece of a sum, and the gathered sum counts it four times.
    mesh = MESH24
    x = np.arange(81.0).reshape(9, 9)

    def kernel(b: Array) -> Array:
        return b.reshape(3, 9, 3)

    paddle_x = DistAttr(mesh, [-1, -1])
    out_attr = DistAttr(mesh, [-1, -1, -1], {1: "sum"})
    assert not consistent(kernel, x, paddle_x, out_attr)
    info = get_rule("reshape").infer_reverse(
        spec(mesh, [9, 9], [-1, -1]), spec(mesh, [3, 9, 3], [-1, -1, -1], {1: "sum"}), [3, 9, 3]
    )
    assert maps(info) == (["[-1,-1] P{1:sum}"], ["[-1,-1,-1] P{1:sum}"])
    xa, oa = info.inputs[0], info.outputs[0]
    assert isinstance(xa, DistAttr) and isinstance(oa, DistAttr)
    assert consistent(kernel, x, xa, oa)
    c = case("reshape/reverse/51")
    assert classify(c, call_engine(c)) == "reshape-reverse-partial-from-out"


def test_deviation_predicates_are_narrow() -> None:
    # an agreeing case is not claimed by any class, even against a made-up answer
    c = case("reshape/reverse/2")
    bogus = SpmdInfo([DistAttr(ProcessMesh.from_shape([2], [0, 1]), [-1])],
                     [DistAttr(ProcessMesh.from_shape([2], [0, 1]), [-1])])
    assert classify(c, bogus) is None
    assert classify(case("unsqueeze/forward/1"), bogus) is None


# ---- every filed case: Paddle's record fails by execution, ours passes ----------------------------
def _attr(mesh: ProcessMesh, e: dict[str, Any]) -> DistAttr:
    mdm = e.get("multi_dims_mapping") or [[] if d == -1 else [d] for d in e["dims_mapping"]]
    return DistAttr(mesh, multi_dims_mapping=mdm, partial={int(k): v for k, v in e["partial"].items()})


def _kernel(c: dict[str, Any]) -> Callable[[Array], Array]:
    if c["op"].startswith("unsqueeze"):
        return unsqueeze_seq(c["attrs"]["axis"])
    out_shape = c["outputs"][0]["shape"]  # the reshape classes hold reverse cases only
    return lambda b: b.reshape(out_shape)


FILED = ("reshape-reverse-unchecked-divisibility", "reshape-reverse-partial-from-out",
         "unsqueeze-sequential-axes")


@pytest.mark.parametrize("op", ["reshape", "reshape2", "unsqueeze", "unsqueeze2"])
def test_every_filed_case_paddle_fails_and_ours_passes_by_execution(op: str) -> None:
    filed = 0
    for c in iter_cases(default_case_paths(), [op]):
        got = call_engine(c)
        if agrees(c, got):
            continue
        dev = classify(c, got)
        if dev == "shape-op-keeps-partial":
            continue  # both answers execute: test_proof_shape_op_keeps_partial_on_every_case
        assert dev in FILED
        filed += 1
        mesh = ProcessMesh.from_shape(c["mesh"]["shape"], c["mesh"]["process_ids"])
        x = np.arange(1.0, 1.0 + math.prod(c["inputs"][0]["shape"])).reshape(c["inputs"][0]["shape"])
        kernel = _kernel(c)
        xa, oa = got.inputs[0], got.outputs[0]
        assert isinstance(xa, DistAttr) and isinstance(oa, DistAttr)
        assert consistent(kernel, x, xa, oa), c["case_id"]
        try:
            px, po = _attr(mesh, c["expected"]["inputs"][0]), _attr(mesh, c["expected"]["outputs"][0])
        except SpmdError:
            continue  # Paddle's attribute is not even valid (partial on a sharding mesh dim)
        if all(mesh.shape[d] == 1 for d in px.sharded_mesh_dims | po.sharded_mesh_dims):
            continue  # one device per shard: any placement executes alike (2 unsqueeze cases)
        if consistent(kernel, x, px, po):
            # reverse unsqueeze: Paddle takes a real dim of out for a new one and drops its shard
            assert c["op"].startswith("unsqueeze") and c["direction"] == "reverse", c["case_id"]
            assert po.sharded_mesh_dims < oa.sharded_mesh_dims, c["case_id"]
    assert filed > 0


def test_flatten_reverse_keeps_the_shard_past_a_size_one_dim() -> None:
    """issue 14, defect 4: x[6,1,8] flattening dims 1-2, out [6,8] dm[-1,1]: the size-1 dim is
    not the major piece, so x's last dim keeps mesh dim 1 (as Paddle answers), and it executes."""
    from proofs import execute

    mesh = ProcessMesh.from_shape([2, 2], list(range(4)))
    x = TensorSpec([6, 1, 8], DistAttr(mesh, [-1, -1, -1]))
    out = TensorSpec([6, 8], DistAttr(mesh, [-1, 1]))
    info = get_rule("flatten").infer_reverse(x, out, 1, 2)
    assert [a.mapping_str() for a in (*info.inputs, *info.outputs)] == [  # type: ignore[union-attr]
        "[-1,-1,1]", "[-1,1]"]
    assert execute("flatten", [TensorSpec([6, 1, 8], info.inputs[0])], info,  # type: ignore[arg-type]
                   {"start_axis": 1, "stop_axis": 2}) == "ok"


# ---- shape-op-keeps-partial: both answers execute, ours with the sum still pending --------------
@pytest.mark.parametrize(("op", "count"), [("squeeze", 16), ("unsqueeze", 22), ("unsqueeze2", 9),
                                           ("flatten", 10)])
def test_proof_shape_op_keeps_partial_on_every_case(op: str, count: int) -> None:
    """Paddle reduces a pending partial before squeeze, unsqueeze and flatten's reverse; run on
    the simulated mesh its answer computes the op (a parallelism deviation), and ours computes it
    too with the partial still pending on the result."""
    from proofs import prove_keeps_partial

    prove_keeps_partial(op, "shape-op-keeps-partial", count, "outputs")


def test_proof_shape_op_keeps_partial_squeeze_forward() -> None:
    """squeeze/forward with x[8,1,6] P{1:sum} on a 2x2 mesh: Paddle reduces x first (x and out
    whole); ours squeezes each device's piece of the sum, and the result is still pending."""
    from proofs import execute

    x = spec(MESH22, [8, 1, 6], [0, -1, -1], {1: "sum"})
    ours = get_rule("squeeze").infer_forward(x, [1])
    assert maps(ours) == (["[0,-1,-1] P{1:sum}"], ["[0,-1] P{1:sum}"])
    paddle = SpmdInfo([DistAttr(MESH22, [0, -1, -1])], [DistAttr(MESH22, [0, -1])])
    xs = spec(MESH22, [8, 1, 6], [-1, -1, -1])
    assert execute("squeeze", [xs], ours, {"axis": [1]}) == "ok"
    assert execute("squeeze", [xs], paddle, {"axis": [1]}) == "ok"
    # the predicate is narrow: an answer that drops a shard as well is not this class
    c = next(c for c in iter_cases(default_case_paths(), ["squeeze"])
             if classify(c, call_engine(c)) == "shape-op-keeps-partial")
    got = call_engine(c)
    assert isinstance(got, SpmdInfo)
    mesh = got.outputs[0].mesh  # type: ignore[union-attr]
    wrong = SpmdInfo([a.without_partial() for a in got.inputs],  # type: ignore[union-attr]
                     [DistAttr(mesh, [0] + [-1] * (got.outputs[0].ndim - 1))])  # type: ignore[union-attr]
    assert classify(c, wrong) != "shape-op-keeps-partial"
