"""``select``, ``gather``, ``index_select`` and ``pow`` of two tensors (issue 26): ViT's CLS
token, BERT's pooler and token type ids, BLOOM's ALiBi slopes. Each module is imported, run
forward and in reverse on 2 simulated ranks with its first input split, and equals torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")

from torch_runs import assert_forward_and_gradients_equal_torch  # noqa: E402

G = torch.Generator().manual_seed(4)
X = torch.randn(2, 5, 6, generator=G)
IDX = torch.tensor([[[4, 0, 1], [2, 2, 3]], [[0, 1, 4], [3, 0, 0]]])  # [2, 2, 3], dim 1 of X

CASES: dict[str, tuple[Callable[..., Any], list[Any]]] = {
    "select: the CLS token": (lambda x: x[:, 0] * 2.0, [X]),
    "select: a negative index, last dim": (lambda x: x.select(-1, -2) + 1.0, [X]),
    "index_select, repeated rows": (
        lambda x, i: torch.index_select(x, 1, i), [X, torch.tensor([4, 0, 4, 2])]),
    "gather along dim 1, index smaller on the others": (
        lambda x, i: torch.gather(x, 1, i), [X, IDX]),
    "gather along the last dim": (
        lambda x, i: torch.gather(x, -1, i), [X, torch.tensor([[[5], [0], [2], [2], [1]]] * 2)]),
    "pow of two tensors": (
        lambda x, y: torch.pow(x.abs() + 0.5, y), [X, torch.randn(5, 6, generator=G)]),
    "pow, integer exponents and a 0 base": (
        lambda x, y: torch.pow(torch.relu(x), y), [X, torch.arange(6)]),
    "pow of a scalar base (ALiBi)": (lambda x: x * torch.pow(2.0, x[:, :, :1]), [X]),
    "repeat, one more dim": (lambda x: x.repeat(2, 1, 3, 1) * 1.5, [X]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_selections_and_pow_equal_torch_forward_and_gradients(case: str) -> None:
    fn, args = CASES[case]
    assert_forward_and_gradients_equal_torch(fn, *args)
