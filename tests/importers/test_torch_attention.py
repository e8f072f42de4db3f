"""torch's default attention (``scaled_dot_product_attention``) and its masks' ``any`` / ``all``
(issue 26): each module is imported, completed on 2 simulated ranks with the batch split,
lowered, and run forward and in reverse; the results equal torch's forward and autograd."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs the torch extra (make test installs it)")

from torch_runs import MESH, Fn, assert_forward_and_gradients_equal_torch  # noqa: E402

from spmdrules import plan  # noqa: E402
from spmdrules.completion import complete  # noqa: E402
from spmdrules.execution.lowering import lower  # noqa: E402
from spmdrules.execution.simulated import run_simulated  # noqa: E402
from spmdrules.importers import torch as torch_import  # noqa: E402
from spmdrules.importers.errors import UnmappedOpError  # noqa: E402

F = torch.nn.functional


def qkv(heads: int = 4, kv_heads: int = 4, lq: int = 6, lk: int = 6) -> list[Any]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, heads, lq, 8, generator=g), torch.randn(2, kv_heads, lk, 8, generator=g),
            torch.randn(2, kv_heads, lk, 8, generator=g)]


def causal_with_padding(lq: int = 6, lk: int = 6) -> Any:
    """A boolean [2, 1, lq, lk] mask: causal, the second sequence's first two keys padding, so
    its first two queries attend to nothing (torch gives those rows 0)."""
    m = torch.ones(lq, lk, dtype=torch.bool).tril().expand(2, 1, lq, lk).clone()
    m[1, :, :, :2] = False
    return m


SDPA: dict[str, tuple[Callable[..., Any], Callable[[], list[Any]]]] = {
    "boolean mask with dead rows": (
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
        lambda: [*qkv(), causal_with_padding()]),
    "float mask": (
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
        lambda: [*qkv(), torch.randn(2, 1, 6, 6, generator=torch.Generator().manual_seed(3))]),
    "is_causal, fewer keys than queries": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        lambda: qkv(lq=6, lk=4)),
    "grouped-query heads": (
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True),
        lambda: [*qkv(heads=4, kv_heads=2), causal_with_padding()]),
    "scale given, negative": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=-0.3),
        lambda: qkv()),
    "no mask, 3-D": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.7),
        lambda: [t[:, 0] for t in qkv()]),
}


@pytest.mark.parametrize("case", list(SDPA))
def test_scaled_dot_product_attention_equals_torch_forward_and_gradients(case: str) -> None:
    fn, args = SDPA[case]
    imp = assert_forward_and_gradients_equal_torch(fn, *args())
    types = {op.type for op in imp.graph.ops}
    assert "matmul" in types and "softmax" in types  # kept whole, then torch's math kernel


@pytest.mark.parametrize(("name", "fn"), [
    ("any.dim keepdim", lambda x: torch.any(x > 0.5, dim=-1, keepdim=True)),
    ("all.dim", lambda x: torch.all(x > -1.0, dim=1)),
    ("any.dims", lambda x: torch.any(x > 1.0, dim=(1, 2))),
    ("all.default", lambda x: torch.all(x > -3.0)),
    ("any of floats (nonzero)", lambda x: torch.any(torch.relu(x - 1.0), dim=-1)),
    ("any.dims of none", lambda x: torch.ops.aten.any.dims(x, [])),
])
def test_any_and_all_map_onto_the_reduction_family_and_equal_torch(name: str, fn: Any) -> None:
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(2))
    imp = torch_import.export(Fn(fn), (x,))
    plan.apply(imp.graph, MESH, {imp.inputs[0]: plan.DataParallel(dim="dp")})
    run = run_simulated(lower(complete(imp.graph)), imp.feeds(x))
    got, want = run.fetch(imp.outputs[0]), fn(x).numpy()
    assert got.dtype == want.dtype and np.array_equal(got, want), (got, want)


def test_train_mode_attention_dropout_is_refused_naming_the_node() -> None:
    def fn(q: Any, k: Any, v: Any) -> Any:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)

    with pytest.raises(UnmappedOpError, match=r"scaled_dot_product_attention.*dropout_p=0\.1"):
        torch_import.export(Fn(fn), qkv())
