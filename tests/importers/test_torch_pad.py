"""``constant_pad_nd`` (``F.pad``, mode constant) onto the pad family (issue 26): the
linear-attention layers of Qwen3.5 and OLMo-hybrid pad their chunks so; before, it was an
unmapped op. Imported, run forward and in reverse on 2 simulated ranks with the first input
split, equal to torch; negative pads crop."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")

from torch_runs import Fn, assert_forward_and_gradients_equal_torch  # noqa: E402

import spmdrules as sr  # noqa: E402
from spmdrules.importers import torch as torch_import  # noqa: E402

F = torch.nn.functional
X = torch.randn(4, 3, 5, generator=torch.Generator().manual_seed(3))

CASES: dict[str, Callable[..., Any]] = {
    "last dim": lambda x: F.pad(x, (1, 2)),
    "two dims, a value": lambda x: F.pad(x, (0, 3, 2, 0), value=-1.5),
    "every dim, the split one too": lambda x: F.pad(x, (1, 1, 1, 1, 2, 0)),
    "a negative pad crops": lambda x: F.pad(x, (-1, 2, 1, -1)),
    "nothing": lambda x: F.pad(x, (0, 0)) * 2.0,
}


@pytest.mark.parametrize("case", list(CASES))
def test_constant_pad_equals_torch_forward_and_gradients(case: str) -> None:
    assert_forward_and_gradients_equal_torch(CASES[case], X)


def test_an_odd_pad_list_is_refused_naming_the_node() -> None:
    """torch.export itself refuses an odd list; the converter's check is for a hand-made one."""
    with pytest.raises(sr.SpmdError, match=r"node 'constant_pad_nd'.*give pairs"):
        ep = torch_import.decompose_program(torch.export.export(Fn(lambda x: F.pad(x, (1, 1))),
                                                                (X,)))
        for n in ep.graph.nodes:
            if n.op == "call_function" and "constant_pad_nd" in str(n.target):
                n.args = (n.args[0], [1, 1, 1])
        torch_import.from_exported(ep)
