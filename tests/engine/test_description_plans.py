"""The fast path of described rules equals their definition.

A described rule remembers its Description per key (``ranks`` for most ops) and answers through a
CompiledRule. With ``Switches.fast`` off it describes every call afresh and answers by the
general ``infer_forward`` / ``infer_reverse``. On every recorded Paddle case of every described
op, and on draws of several sizes per rank, both must give the same answer or the same error.
"""

from __future__ import annotations

from typing import Any

import pytest

import spmdrules as sr
from spmdrules import conformance
from spmdrules.conformance.calls import build_call
from spmdrules.core.errors import SpmdError
from spmdrules.engine.described import Switches


def _described(name: str) -> bool:
    return "register_described" in getattr(sr.get_rule(name)._fwd.fn, "__qualname__", "")


DESCRIBED = sorted(n for n in sr.list_rules() if _described(n))


Call = tuple[str, str, Any, dict[str, Any]]


def _answer(call: Call) -> Any:
    name, direction, args, attrs = call
    rule = sr.get_rule(name)
    rule.cache_clear()
    try:
        if direction == "forward":
            return rule.infer_forward(*args, **attrs)
        return rule.infer_reverse(*args, **attrs)
    except SpmdError as e:
        return (type(e).__name__, str(e))


@pytest.fixture(scope="module")
def calls() -> list[tuple[str, Call]]:
    """Every recorded case of a described op, read and built into its call once for both orders
    (reading and building the ~9k cases cost more CPU than answering them). The specs of a call
    are immutable, so the same call serves both answers of both orders."""
    paths = conformance.default_case_paths()
    ops = {n.removesuffix("_grad") for n in DESCRIBED}
    return [(case["case_id"], build_call(case))
            for case in conformance.iter_cases(paths, sorted(ops))]


def test_the_new_families_are_described() -> None:
    assert {"slice", "gather", "where", "cumsum", "scatter", "tile", "pad"} <= set(DESCRIBED)


@pytest.mark.parametrize("fast_first", [True, False])
def test_plans_and_remembered_descriptions_equal_the_definition(
        fast_first: bool, calls: list[tuple[str, Call]]) -> None:
    """Half the runs fill the caches first, half describe first: a remembered description from
    other sizes of the same rank must still give the fresh answer."""
    assert len(calls) > 5000
    different = []
    try:
        for case_id, call in calls:
            Switches.fast = fast_first
            first = _answer(call)
            Switches.fast = not fast_first
            second = _answer(call)
            if first != second:
                different.append((case_id, first, second))
    finally:
        Switches.fast = True
    assert not different, different[:5]
