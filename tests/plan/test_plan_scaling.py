"""``plan.apply`` does work linear in its entries (issue 23, item 24).

No timing is asserted (bench/plan_apply.py times it, side by side with af95ee8): the work is
counted instead, as the function calls (Python and C, ``sys.setprofile``) one ``apply`` makes,
which do not depend on the machine. A per-layer Megatron plan on a LLaMA decoder of L layers has
7L entries over 9L + 2 parameters: at 4x the layers, linear work is 4x the calls, and matching
every key against every name (as af95ee8 did) is about 16x."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest

import spmdrules as sr
from spmdrules import examples, plan

MESH = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
SIZES = {"batch": 4, "seq": 8, "hidden": 32, "heads": 4, "kv_heads": 2, "ffn": 64, "vocab": 64}
PER_LAYER = {"q": plan.ColwiseParallel(), "k": plan.ColwiseParallel(),
             "v": plan.ColwiseParallel(), "gate": plan.ColwiseParallel(),
             "up": plan.ColwiseParallel(), "o": plan.RowwiseParallel(),
             "down": plan.RowwiseParallel()}
#: a key per layer and module, read as a name, or as a glob with a literal prefix
KEYS: dict[str, Callable[[int, str], str]] = {
    "name": lambda i, m: f"layers.{i}.{m}",
    "glob": lambda i, m: f"layers.{i}.{m}*",
}


def _calls(layers: int, key: Callable[[int, str], str]) -> int:
    g = examples.llama_decoder(layers, MESH, **SIZES, annotate=False)
    entries = {key(i, m): style for i in range(layers) for m, style in PER_LAYER.items()}
    plan.apply(g, MESH, {"embed": plan.VocabParallel()})  # warm: imports, caches of the styles
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        plan.apply(g, MESH, entries)
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize("kind", sorted(KEYS))
def test_apply_does_work_linear_in_its_entries(kind: str) -> None:
    small, large = _calls(8, KEYS[kind]), _calls(32, KEYS[kind])
    assert large / small < 4 * 1.25, (small, large)  # 56 -> 224 entries
