"""Every shipped Paddle 3.3.1 case of the registered op names (167, and issue 12's), run through the API.

Targets (issue 2): no crash; every disagreement belongs to a documented deviation class; at least
99% agreement over the cases outside those classes.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from recorded import Compared

import spmdrules as sr
from spmdrules import conformance
from spmdrules.conformance.deviation import deviations

#: one unit of work under xdist with test_execution.py: both read the session's ``compared``,
#: built in the setup of this file's first test (every shipped case: the budget of
#: test_execution.py's executions, which a loaded machine needs)
pytestmark = [pytest.mark.timeout(900), pytest.mark.xdist_group("conformance")]

UNARY = [
    "abs",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "assign",
    "atan",
    "atanh",
    "bernoulli",
    "bitwise_not",
    "ceil",
    "celu",
    "clip",
    "conj",
    "cos",
    "cosh",
    "digamma",
    "dropout",
    "elementwise_unary",
    "elu",
    "erf",
    "erfinv",
    "exp",
    "expm1",
    "fill",
    "floor",
    "hardshrink",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "leaky_relu",
    "lgamma",
    "log",
    "log10",
    "log1p",
    "log2",
    "logical_not",
    "logit",
    "logsigmoid",
    "mish",
    "poisson",
    "pow",
    "reciprocal",
    "relu",
    "relu6",
    "round",
    "rsqrt",
    "scale",
    "selu",
    "sigmoid",
    "sign",
    "silu",
    "sin",
    "sinh",
    "softplus",
    "softshrink",
    "softsign",
    "sqrt",
    "square",
    "stanh",
    "swish",
    "tan",
    "tanh",
    "tanh_shrink",
    "thresholded_relu",
    "trunc",
    "gelu",
]
BINARY = [
    "add",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "divide",
    "elementwise_add",
    "elementwise_binary",
    "elementwise_div",
    "elementwise_mul",
    "elementwise_pow",
    "floor_divide",
    "fmax",
    "fmin",
    "greater_than",
    "heaviside",
    "less_than",
    "logical_and",
    "logical_or",
    "logical_xor",
    "maximum",
    "minimum",
    "not_equal",
    "remainder",
    "subtract",
    "trunc_divide",
    "multiply",
    "swiglu",
]
MATMUL = ["matmul", "matmul_v2", "bmm", "einsum"]
REDUCTIONS = [
    "all",
    "amax",
    "amin",
    "any",
    "frobenius_norm",
    "max",
    "min",
    "prod",
    "reduce_max",
    "reduce_sum",
    "squared_l2_norm",
    "sum",
    "argmax",
    "argmin",
    "mean_all",
    "logsumexp",
    "p_norm",
    "reduce_base",
]
SHAPE = [
    "reshape",
    "reshape2",
    "flatten",
    "squeeze",
    "unsqueeze",
    "unsqueeze2",
    "transpose",
    "transpose2",
]
CONCAT = ["concat", "split", "split_with_num", "stack", "unbind", "add_n"]
GENERIC = ["default_data_parallel", "default_", "replicated"]
NN = ["softmax", "log_softmax", "layer_norm", "fused_rms_norm", "embedding", "lookup_table_v2"]
FOUNDATION = UNARY + BINARY + MATMUL + REDUCTIONS + SHAPE + CONCAT + GENERIC + NN
GRAD_RULES = ["bmm_grad", "gelu_grad", "mean_all_grad", "einsum_grad"]
#: issue 11: slicing, indexing, scatter and gather, scans, sorting, tiling and masks
PART1 = ["slice", "strided_slice", "gather", "gather_nd", "index_select", "take_along_axis",
         "put_along_axis", "index_put", "scatter", "scatter_nd_add", "tile", "expand_as",
         "expand_as_v2", "pad", "roll", "where", "one_hot", "triu", "tril_triu", "cumsum", "cummax",
         "cummin", "topk", "argsort", "nonzero", "unique"]
PART1_GRADS = ["argsort_grad", "cummax_grad", "cummin_grad", "expand_as_grad", "expand_as_v2_grad",
               "index_put_grad", "index_select_grad", "pad_grad", "put_along_axis_grad",
               "roll_grad", "strided_slice_grad", "take_along_axis_grad", "topk_grad"]
#: issue 12: attention, rotary embedding, mixture-of-experts combine, roi_align, the channel
#: norms, the fused and vocab-parallel ops, convolution
PART2 = ["flash_attention", "fused_rotary_position_embedding", "moe_combine", "roi_align",
         "batch_norm", "group_norm", "instance_norm", "linear_v2", "fused_gemm_epilogue",
         "label_smooth", "fused_dropout_add", "fused_linear_param_grad_add", "c_embedding",
         "c_softmax_with_cross_entropy", "c_softmax_with_multi_label_cross_entropy",
         "conv2d", "conv2d_transpose", "conv3d", "depthwise_conv2d"]
#: ops models need for which Paddle 3.3.1 records no rule (proven by execution in verify)
PART2_GRADS = ["moe_combine_grad", "roi_align_grad"]
BEYOND_PADDLE = ["mean", "cast", "expand", "full", "full_like", "arange"]
Results = tuple[dict[str, conformance.OpTally], list[conformance.CaseResult]]


def test_the_foundation_names_are_139() -> None:
    assert len(UNARY) == 67 and len(BINARY) == 27 and len(REDUCTIONS) == 18
    assert len(set(FOUNDATION)) == len(FOUNDATION) == 139


def test_part1_names_are_26() -> None:
    assert len(set(PART1)) == len(PART1) == 26 and not set(PART1) & set(FOUNDATION)


@pytest.mark.parametrize("name", FOUNDATION + GRAD_RULES + PART1 + PART1_GRADS + PART2
                         + PART2_GRADS + BEYOND_PADDLE)
def test_registered(name: str) -> None:
    rule = sr.get_rule(name)
    assert rule.infer_forward is not None


@pytest.fixture(scope="module")
def results(compared: Compared) -> Results:
    """Every shipped case of every registered op (the foundation's and the later families')."""
    return compared.tallies, compared.misses


def test_every_foundation_op_has_cases(results: Results) -> None:
    tallies, _ = results
    assert set(FOUNDATION) <= set(tallies)


def test_every_registered_name_runs_every_shipped_case(results: Results) -> None:
    tallies, _ = results
    assert set(FOUNDATION) | set(PART1) | set(PART2) <= set(tallies)
    assert len(tallies) == 167 + len(PART2) and all(t.cases for t in tallies.values())


def test_part1_agreement_outside_the_deviation_classes(results: Results) -> None:
    tallies, misses = results
    part1 = set(PART1)
    total = sum(t.cases for op, t in tallies.items() if op in part1)
    deviating = sum(1 for m in misses if m.deviation is not None and m.op in part1)
    agree = sum(t.agree for op, t in tallies.items() if op in part1)
    assert total > 4000 and agree / (total - deviating) >= 0.99


def test_no_crash(results: Results) -> None:
    _, misses = results
    crashes = [m for m in misses if m.verdict == "crash"]
    assert not crashes, "\n".join(f"{m.case_id}: {m.detail}" for m in crashes[:20])


def test_every_disagreement_is_a_documented_deviation(
    results: Results,
) -> None:
    _, misses = results
    unexplained = [m for m in misses if m.deviation is None]
    assert not unexplained, f"{len(unexplained)} unexplained disagreements, e.g.\n" + "\n".join(
        f"{m.case_id}: {m.detail}" for m in unexplained[:20]
    )
    used = Counter(m.deviation for m in misses)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "deviations.md").read_text()
    for name in used:
        assert f"`{name}`" in doc, f"deviation class {name} is not listed in docs/deviations.md"


def test_agreement_outside_the_deviation_classes(
    results: Results,
) -> None:
    tallies, misses = results
    foundation = set(FOUNDATION)
    total = sum(t.cases for op, t in tallies.items() if op in foundation)
    deviating = sum(1 for m in misses if m.deviation is not None and m.op in foundation)
    agree = sum(t.agree for op, t in tallies.items() if op in foundation)
    assert agree / (total - deviating) >= 0.99


def test_deviation_table_in_docs_is_current(results: Results) -> None:
    """docs/deviations.md carries the measured table: class, ops, count, one case."""
    _, misses = results
    table = conformance.deviation_table(conformance.deviation_summary(misses))
    doc = (Path(__file__).resolve().parents[2] / "docs" / "deviations.md").read_text()
    assert table in doc, "regenerate with: python -m spmdrules.conformance --deviations\n" + table


def test_deviation_classes_are_narrow() -> None:
    names = [d.name for d in deviations()]
    assert len(names) == len(set(names))
    for d in deviations():
        assert d.ops, f"deviation {d.name} names no op"
        assert d.summary


@pytest.mark.parametrize("case_id", ["pad/reverse/5", "instance_norm/reverse/0",
                                     "einsum/reverse/0", "flash_attention/reverse/0",
                                     "flash_attention/reverse/15"])
def test_a_difference_of_format_only_is_an_agreement(case_id: str) -> None:
    """Issue 23, item 16: Paddle leaves out pad_grad's x, instance_norm_grad's bias and
    einsum_grad's inner_cache, lays out flash_attention's unwritten softmax, and answers its
    seed_offset with a placeholder: these answers execute as ours (tests/conformance/
    test_formats.py) and compare as ours; they were filed as deviations proven by execution."""
    op = case_id.split("/")[0]
    (case,) = [c for c in conformance.iter_cases(conformance.default_case_paths(), [op])
               if c["case_id"] == case_id]
    r = conformance.run_case(case)
    assert r.verdict == "agree", r.detail
