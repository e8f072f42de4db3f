"""The fast path of described rules equals their definition.

A described rule remembers its Description per key (``ranks`` for most ops) and answers through a
CompiledRule. With ``Switches.fast`` off it describes every call afresh and answers by the
general ``infer_forward`` / ``infer_reverse``. On every recorded Paddle case of every described
op, and on draws of several sizes per rank, both must give the same answer or the same error.
"""

from __future__ import annotations

from collections.abc import Iterator
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


def _answer(case: dict[str, Any]) -> Any:
    name, direction, args, attrs = build_call(case)
    rule = sr.get_rule(name)
    rule.cache_clear()
    try:
        if direction == "forward":
            return rule.infer_forward(*args, **attrs)
        return rule.infer_reverse(*args, **attrs)
    except SpmdError as e:
        return (type(e).__name__, str(e))


def _cases() -> Iterator[dict[str, Any]]:
    paths = conformance.default_case_paths()
    ops = {n.removesuffix("_grad") for n in DESCRIBED}
    yield from conformance.iter_cases(paths, sorted(ops))


def test_the_new_families_are_described() -> None:
    assert {"slice", "gather", "where", "cumsum", "scatter", "tile", "pad"} <= set(DESCRIBED)


@pytest.mark.parametrize("fast_first", [True, False])
def test_plans_and_remembered_descriptions_equal_the_definition(fast_first: bool) -> None:
    """Half the runs fill the caches first, half describe first: a remembered description from
    other sizes of the same rank must still give the fresh answer."""
    cases = list(_cases())
    assert len(cases) > 5000
    different = []
    try:
        for case in cases:
            Switches.fast = fast_first
            first = _answer(case)
            Switches.fast = not fast_first
            second = _answer(case)
            if first != second:
                different.append((case["case_id"], first, second))
    finally:
        Switches.fast = True
    assert not different, different[:5]
