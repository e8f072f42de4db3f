"""einsum / einsum_grad: hand-written cases, Paddle's quirks, typed errors, execution proofs of our
answers on the recorded cases, and the deviation classes in docs/deviations/matmul.md."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from spmdrules import DistAttr, ProcessMesh, SpmdInfo, TensorSpec, get_rule
from spmdrules.conformance.calls import build_call
from spmdrules.conformance.deviation import classify
from spmdrules.conformance.runner import default_case_paths, iter_cases
from spmdrules.core.errors import RuleArgumentError, ShardingConflictError, UnsupportedError
from spmdrules.core.shards import ShardMismatch, gather, run_local
from spmdrules.execution.local import get_kernel
from spmdrules.verify import run_case
from spmdrules.verify.cases import Case

Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(11)

MESH2 = ProcessMesh.from_shape([2], [0, 1])
MESH8 = ProcessMesh.from_shape([8], list(range(8)))
MESH22 = ProcessMesh.from_shape([2, 2], list(range(4)))
MESH24 = ProcessMesh.from_shape([2, 4], list(range(8)))


def spec(mesh: ProcessMesh, shape: Sequence[int], dm: Sequence[Any], partial: Any = None) -> TensorSpec:
    if any(isinstance(d, list) for d in dm):
        mdm = [d if isinstance(d, list) else ([] if d == -1 else [d]) for d in dm]
        return TensorSpec(list(shape), DistAttr(mesh, partial=partial, multi_dims_mapping=mdm))
    return TensorSpec(list(shape), DistAttr(mesh, list(dm), partial))


def s(a: Any) -> Any:
    if isinstance(a, tuple):
        return [s(x) for x in a]
    assert isinstance(a, DistAttr)
    return a.mapping_str()


def fwd(equation: str, *ts: TensorSpec) -> tuple[Any, Any]:
    info = get_rule("einsum").infer_forward(list(ts), equation)
    return s(info.inputs[0]), s(info.outputs[0])


def grad(equation: str, ins: Sequence[TensorSpec], g: TensorSpec) -> tuple[Any, Any, Any]:
    info = get_rule("einsum_grad").infer_forward(list(ins), list(ins), g, equation)
    assert info.inputs[1] == info.inputs[0]  # the cache lays out as the operands
    return s(info.inputs[0]), s(info.inputs[2]), s(info.outputs[0])


# ---- forward ------------------------------------------------------------------------------------------
def test_contracted_letters_give_sum_partials() -> None:
    # einsum/forward/2
    assert fwd("ae,cbde->ecbd", spec(MESH24, [2, 4], [1, 0]),
               spec(MESH24, [4, 8, 4, 4], [-1, -1, -1, 0])) == (
        ["[1,0]", "[-1,-1,-1,0]"], "[0,-1,-1,-1] P{1:sum}")
    assert fwd("c->", spec(MESH8, [8], [0])) == (["[0]"], "[] P{0:sum}")


def test_quirk_a1_one_letter_on_two_mesh_dims_is_an_error() -> None:
    with pytest.raises(ShardingConflictError, match=r"einsum: tensor axis 'j' \(tensor "
                       r"'inputs\[1\]' dim 0\) is sharded by mesh dims \[1\] and \[0\]"):
        fwd("ij,jk->ik", spec(MESH22, [4, 8], [-1, 1]), spec(MESH22, [8, 4], [0, -1]))


def test_a_mesh_dim_wanted_by_two_letters_goes_to_the_first_met() -> None:
    # einsum/forward/50 (and 'a,b->ab': y's b yields)
    assert fwd("aeb,adcb->", spec(MESH8, [8, 4, 4], [-1, 0, -1]),
               spec(MESH8, [8, 5, 4, 4], [-1, -1, 0, -1])) == (
        ["[-1,0,-1]", "[-1,-1,-1,-1]"], "[] P{0:sum}")
    assert fwd("a,b->ab", spec(MESH22, [8], [0]), spec(MESH22, [8], [0])) == (
        ["[0]", "[-1]"], "[0,-1]")


def test_no_divisibility_check_no_size_one_rule_and_input_partials_dropped() -> None:
    # einsum/forward/48: e has size 1 and stays sharded; einsum/forward/4: partial dropped
    mesh = ProcessMesh.from_shape([2, 2, 2], list(range(8)))
    assert fwd("bced,aced->b", spec(mesh, [8, 16, 1, 10], [-1, 1, 0, 2]),
               spec(mesh, [4, 16, 1, 10], [-1, 1, 0, 2]))[1] == "[-1] P{0:sum,1:sum,2:sum}"
    mesh42 = ProcessMesh.from_shape([4, 2], list(range(8)))
    assert fwd("ba,ba->", spec(mesh42, [10, 3], [-1, 0], [1]), spec(mesh42, [10, 3], [-1, 0])) == (
        ["[-1,0]", "[-1,0]"], "[] P{0:sum}")


def test_co_sharded_input_is_read_as_its_major_mesh_dim() -> None:
    # as Paddle's rule reads the flat dims_mapping ("fallback to sharding by mesh dim 0")
    assert fwd("ab,ac->bc", spec(MESH22, [8, 4], [[0, 1], -1]), spec(MESH22, [8, 8], [0, -1])) == (
        ["[0,-1]", "[0,-1]"], "[-1,-1] P{0:sum}")


def test_diagonal_letters_are_replicated() -> None:
    # Paddle answers 'ii,ij->j' with out [1] P{0} from replicated operands: a wrong partial
    x, y = spec(MESH22, [4, 4], [0, -1]), spec(MESH22, [4, 8], [-1, 1])
    assert fwd("ii,ij->j", x, y) == (["[-1,-1]", "[-1,1]"], "[1]")
    check_forward("ii,ij->j", get_rule("einsum").infer_forward([x, y], "ii,ij->j"), [x, y])


def test_typed_errors() -> None:
    x = spec(MESH2, [4, 8], [-1, -1])
    with pytest.raises(RuleArgumentError, match=r"einsum: einsum notation 'ab,bc': missing '->'"):
        fwd("ab,bc", x, spec(MESH2, [8, 4], [-1, -1]))
    with pytest.raises(RuleArgumentError, match=r"ellipsis"):
        fwd("...b,bc->...c", x, spec(MESH2, [8, 4], [-1, -1]))
    with pytest.raises(UnsupportedError, match=r"at most 2 operands"):
        fwd("ab,bc,cd->ad", x, spec(MESH2, [8, 4], [-1, -1]), spec(MESH2, [4, 4], [-1, -1]))
    with pytest.raises(RuleArgumentError, match=r"names 2 operands but 1 tensors"):
        fwd("ab,bc->ac", x)
    with pytest.raises(RuleArgumentError, match=r"'inputs\[0\]' has rank 2 but the equation gives "
                       r"it 3 letters"):
        fwd("abc->a", x)
    with pytest.raises(RuleArgumentError, match=r"letter 'b' is 'inputs\[1\]' dim 0 of size 6 but "
                       r"'inputs\[0\]' dim 1 of size 8"):
        fwd("ab,bc->ac", x, spec(MESH2, [6, 4], [-1, -1]))
    with pytest.raises(RuleArgumentError, match=r"'out_grad' has shape \[4\] but"):
        grad("ab->b", [x], spec(MESH2, [4], [-1]))


# ---- gradient rule ------------------------------------------------------------------------------------
def test_grad_operands_take_the_forward_layout_and_out_grad_the_forward_output() -> None:
    # einsum/reverse/25: d (x) and b (y) both want mesh 2; d is met first
    mesh = ProcessMesh.from_shape([2, 2, 2], list(range(8)))
    x, y = spec(mesh, [6, 16, 9], [-1, 2, -1]), spec(mesh, [6, 9, 7], [0, 2, -1])
    assert grad("cdb,cba->dca", [x, y], spec(mesh, [16, 6, 7], [0, -1, 2])) == (
        ["[0,2,-1]", "[0,-1,-1]"], "[2,0,-1]", ["[0,2,-1]", "[0,-1,-1] P{2:sum}"])
    # einsum/reverse/8: out_grad's own sharding is not used with two operands
    assert grad("ba,b->ba", [spec(MESH22, [8, 16], [-1, -1]), spec(MESH22, [8], [-1])],
                spec(MESH22, [8, 16], [-1, 0]))[1] == "[-1,-1]"


def test_unary_grad_merges_out_grad() -> None:
    # einsum/reverse/163 and einsum/reverse/26 (conflict between x and out_grad)
    assert grad("ba->ab", [spec(MESH22, [32, 12], [-1, -1])], spec(MESH22, [12, 32], [0, -1])) == (
        ["[-1,0]"], "[0,-1]", ["[-1,0]"])
    mesh = ProcessMesh.from_shape([2, 3], list(range(6)))
    with pytest.raises(ShardingConflictError, match=r"axis 'b'"):
        grad("ba->b", [spec(mesh, [4, 5], [0, 1])], spec(mesh, [4], [1]))


# ---- execution on the recorded cases -------------------------------------------------------------------
def _attrs(slots: Any) -> list[DistAttr]:
    assert all(isinstance(a, DistAttr) for a in slots)
    return list(slots)


def check_forward(equation: str, info: SpmdInfo, ts: Sequence[TensorSpec]) -> None:
    arrays = [RNG.standard_normal(t.shape) for t in ts]
    want = np.einsum(equation, *arrays)
    (oa,) = _attrs(info.outputs)
    blocks = run_local(lambda *b: np.einsum(equation, *b), list(
        zip(arrays, _attrs(info.inputs[0]), strict=True)))
    np.testing.assert_allclose(gather(blocks, want.shape, oa), want, atol=1e-9)


def _grad_kernel(equation: str, i: int) -> Any:
    """d(out)/d(operand i) contracted with out_grad, broadcast over the letters only i has."""
    lhs, out = equation.split("->")
    ops = lhs.split(",")
    mine, others = ops[i], [o for j, o in enumerate(ops) if j != i]
    have = set(out) | {c for o in others for c in o}
    present = "".join(c for c in mine if c in have)

    def kernel(x: Array, g: Array, *rest: Array) -> Array:
        if not out:
            g = np.reshape(g, ())  # scatter hands a 0-d tensor out as shape (1,)
        r = np.einsum(",".join([out, *others]) + "->" + present, g, *rest)
        for pos, c in enumerate(mine):
            if c not in have:
                r = np.expand_dims(r, pos)
        return np.broadcast_to(r, x.shape).copy()

    return kernel


def check_grad(equation: str, info: SpmdInfo, ins: Sequence[TensorSpec], g_t: TensorSpec) -> None:
    arrays = [RNG.standard_normal(t.shape) for t in ins]
    g = RNG.standard_normal(g_t.shape)
    in_attrs = _attrs(info.inputs[0])
    (ga,) = _attrs((info.inputs[2],))
    grad_attrs = _attrs(info.outputs[0])
    for i, (x, xa, dxa) in enumerate(zip(arrays, in_attrs, grad_attrs, strict=True)):
        kernel = _grad_kernel(equation, i)
        others = [(a, at) for j, (a, at) in enumerate(zip(arrays, in_attrs, strict=True)) if j != i]
        want = kernel(x, g, *(a for a, _ in others))
        blocks = run_local(kernel, [(x, xa), (g, ga), *others])
        np.testing.assert_allclose(gather(blocks, x.shape, dxa), want, atol=1e-9)


def test_our_answers_execute_correctly_on_the_recorded_cases() -> None:
    n_fwd = n_grad = 0
    for case in iter_cases(default_case_paths(), ops=["einsum"]):
        if "error" in case["expected"] and "as Partial" not in case["expected"]["error"]:
            continue
        name, _, args, attrs = build_call(case)
        info = get_rule(name).infer_forward(*args, **attrs)
        if case["direction"] == "forward":
            check_forward(attrs["equation"], info, args[0])
            n_fwd += 1
        else:
            check_grad(attrs["equation"], info, args[0], args[2])
            n_grad += 1
    assert n_fwd > 200 and n_grad > 200


# ---- deviations -----------------------------------------------------------------------------------------
def test_proof_einsum_grad_partial_on_shard() -> None:
    # einsum/reverse/3, mesh [2]: b (x) and e (y) both want mesh 0. Paddle raises "Trying to Set
    # dim 0 as Partial which is a Sharding dim" (x_grad sharded on b, partial from e). Ours: b keeps
    # mesh 0, e yields; y_grad sums over b and is partial on 0; both gradients execute correctly.
    eq = "bda,ec->abec"
    x, y = spec(MESH2, [4, 16, 4], [0, -1, -1]), spec(MESH2, [16, 3], [0, -1])
    g = spec(MESH2, [4, 4, 16, 3], [-1, -1, 0, -1])
    info = get_rule("einsum_grad").infer_forward([x, y], [x, y], g, eq)
    assert (s(info.inputs[0]), s(info.inputs[2]), s(info.outputs[0])) == (
        ["[0,-1,-1]", "[-1,-1]"], "[-1,0,-1,-1]", ["[0,-1,-1]", "[-1,-1] P{0:sum}"])
    check_grad(eq, info, [x, y], g)
    case: dict[str, Any] = {"op": "einsum", "direction": "reverse", "reverse_kind": "grad",
            "expected": {"error": "(InvalidArgument) Trying to Set dim 0 as Partial which is a "
                         "Sharding dim.", "error_type": "ValueError"}}
    assert classify(case, info) == "einsum-grad-partial-on-shard"
    case["expected"]["error"] = "Tensor Axis[b] is Sharded by two different mesh dimension"
    assert classify(case, info) is None


def test_proof_einsum_unary_grad_partial() -> None:
    # einsum/reverse/217, mesh [2,3]: 'd->' with out_grad [] P{0,1}. Paddle: x_grad [-1] without
    # partial: every coordinate broadcasts its own piece of out_grad, so replicas disagree.
    mesh = ProcessMesh.from_shape([2, 3], list(range(6)))
    x, g = spec(mesh, [32], [-1]), spec(mesh, [], [], [0, 1])
    info = get_rule("einsum_grad").infer_forward([x], [x], g, "d->")
    assert s(info.outputs[0]) == ["[-1] P{0:sum,1:sum}"]
    gv = np.asarray(RNG.standard_normal())
    blocks = run_local(lambda gb: np.broadcast_to(np.reshape(gb, ()), (32,)).copy(),
                                [(gv, DistAttr(mesh, [], [0, 1]))])
    with pytest.raises(ShardMismatch, match="replicas disagree"):
        gather(blocks, (32,), DistAttr(mesh, [-1]))
    check_grad("d->", info, [x], g)
    case: dict[str, Any] = {"op": "einsum", "direction": "reverse", "reverse_kind": "grad",
            "inputs": [[{"shape": [32]}]], "outputs": [{"partial": {"0": "sum", "1": "sum"}}],
            "expected": {"inputs": [], "outputs": [[{"dims_mapping": [-1], "partial": {}}]]}}
    assert classify(case, info) == "einsum-unary-grad-partial"


def test_einsum_grad_lays_out_every_argument_and_runs() -> None:
    # issue 23, item 14: the answer gave inner_cache no attribute (Paddle's format): 2 input
    # attributes for 3 arguments, which no lowering or execution can take
    x, y = spec(MESH2, [4, 6], [0, -1]), spec(MESH2, [6, 3], [-1, -1])
    g = spec(MESH2, [4, 3], [0, -1])
    info = get_rule("einsum_grad").infer_forward([x, y], [x, y], g, "ij,jk->ik")
    assert len(info.inputs) == 3 and info.inputs[1] == info.inputs[0]
    case = Case(rule="einsum_grad", direction="forward", op="einsum_grad", mesh=MESH2,
                inputs=((x, y), (x, y), g), outputs=((x, y),), attrs={"equation": "ij,jk->ik"},
                domains=(("real", "real"), ("real", "real"), "real"))
    result = run_case(case, info, get_kernel("einsum_grad"), RNG, alternatives=False)
    assert result.status == "ok", result.detail


def test_einsum_grad_lays_a_cache_of_another_shape_out_replicated() -> None:
    # a cache that is not its operand's shape (Paddle's real cache may be a transposed copy), or
    # one with no operand, is laid out whole: the kernel does not read it
    x, y = spec(MESH2, [4, 6], [0, -1]), spec(MESH2, [6, 3], [-1, -1])
    g = spec(MESH2, [4, 3], [0, -1])
    cache = [spec(MESH2, [6, 4], [0, -1]), y, spec(MESH2, [2], [0])]
    info = get_rule("einsum_grad").infer_forward([x, y], cache, g, "ij,jk->ik")
    assert s(info.inputs[1]) == ["[-1,-1]", "[-1,-1]", "[-1]"]
