"""The format equivalences (``spmdrules.conformance.formats``), proven by execution on the shipped
cases: where Paddle writes a slot in another format (leaves it out, answers a placeholder, lays
out an output the kernel does not write), its answer as written is malformed, and the same answer
with those slots written as ours executes correctly; the comparator reads the two as one.
Issue 23, item 16: these were deviation classes claiming Paddle's answer executes wrongly."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from spmdrules.conformance import default_case_paths, iter_cases, run_case
from spmdrules.conformance.execution import check_case, filled, paddle_answer

#: (op, its records whose answers Paddle writes in another format, how many)
FORMATS = [("pad", "grad", 180), ("instance_norm", "grad", 108), ("einsum", "grad", 197),
           ("flash_attention", "reverse", 134)]


def _cases(op: str, kind: str) -> list[dict[str, Any]]:
    return [c for c in iter_cases(default_case_paths(), [op]) if c["direction"] == "reverse"
            and c.get("reverse_kind", "reverse") == kind and "error" not in c["expected"]]


@pytest.mark.parametrize(("op", "kind", "count"), FORMATS, ids=[f[0] for f in FORMATS])
def test_paddle_s_format_executes_alike_once_written_as_ours(op: str, kind: str, count: int
                                                              ) -> None:
    verdicts: Counter[str] = Counter()
    for case in _cases(op, kind):
        r = run_case(case)
        assert r.answer is not None and not isinstance(r.answer, BaseException)
        other = filled(case, paddle_answer(case), r.answer)
        if other is None:
            continue  # written as ours: nothing to fill
        e = check_case(case, r.answer)
        verdicts[e.paddle] += 1
        assert e.ours == "ok", e.detail
        if e.paddle == "format":  # the only difference is the format: compared as one answer
            assert r.verdict == "agree", (case["case_id"], r.detail)
        else:  # a deviation beside the format, proven like any other
            assert r.deviation is not None and e.paddle in ("malformed", "wrong"), e
    assert verdicts["format"] == count, verdicts


def test_an_omitted_slot_is_compared_only_when_paddle_leaves_it_out() -> None:
    (case,) = [c for c in _cases("pad", "grad") if c["case_id"] == "pad/reverse/5"]
    r = run_case(case)
    assert r.verdict == "agree"
    # Paddle answering both arguments, the first unlike ours, is another answer
    exp = case["expected"]
    other = dict(case, expected=dict(exp, inputs=[{"dims_mapping": [0, -1, -1, -1]},
                                                  *exp["inputs"]]))
    assert run_case(other).verdict == "disagree"


def test_a_placeholder_is_equal_only_to_a_replicated_answer() -> None:
    case = next(c for c in _cases("flash_attention", "reverse")
                if c["expected"]["outputs"][3].get("process_mesh", 0) is None
                and run_case(c).verdict == "agree")
    seed = {"dims_mapping": [0], "partial": {}}  # Paddle answering seed_offset split: another
    sharded = dict(case, expected=dict(case["expected"], outputs=[
        *case["expected"]["outputs"][:3], seed]))
    assert run_case(sharded).verdict == "disagree"
