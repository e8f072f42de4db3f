"""The routed-experts layer of issue 24, built twice from one description: with spmdrules' graph
API and as the same einsums on torch tensors (for DTensor). Tokens and experts share one mesh
dim ``ep`` of 4 processes: the tokens ``x`` [T, D] and their routing weights ``gates`` [T, E]
split on T, the experts' weights ``w1`` [E, D, F] and ``w2`` [E, F, D] split on E, the output
[T, D] split on T like the input. Dispatch ``td,te->etd``, the experts
``etd,edf->etf`` + relu and ``etf,efd->etd``, combine ``etd,te->td``."""

from __future__ import annotations

from typing import Any

import spmdrules as sr

T, D, E, F = 16, 128, 4, 256
EP = 4
MESH = sr.ProcessMesh(list(range(EP)), dim_names=["ep"])
#: name -> (shape, the dim split on ep)
TENSORS: dict[str, tuple[tuple[int, ...], int]] = {
    "x": ((T, D), 0), "gates": ((T, E), 0), "w1": ((E, D, F), 0), "w2": ((E, F, D), 0),
}
DISPATCH, UP, DOWN, COMBINE = "td,te->etd", "etd,edf->etf", "etf,efd->etd", "etd,te->td"


def graph() -> Any:
    """The layer as a graph, its inputs and output annotated."""
    from spmdrules.graph import ops
    from spmdrules.graph.annotate import shard
    from spmdrules.graph.graph import Graph

    def split(name: str, t: Any) -> Any:
        shape, dim = TENSORS[name]
        return shard(t, MESH, tuple("ep" if d == dim else None for d in range(len(shape))))

    with Graph("routed_experts") as g:
        x, gates = (split(n, g.input(n, list(TENSORS[n][0]))) for n in ("x", "gates"))
        w1, w2 = (split(n, g.param(n, list(TENSORS[n][0]))) for n in ("w1", "w2"))
        h = ops.einsum([x, gates], equation=DISPATCH)
        y = ops.einsum([ops.relu(ops.einsum([h, w1], equation=UP)), w2], equation=DOWN)
        split("x", ops.einsum([y, gates], equation=COMBINE))
    return g


def torch_forward(v: dict[str, Any]) -> Any:
    """The same layer on torch tensors (or DTensors) ``v`` named as TENSORS."""
    import torch

    h = torch.einsum(DISPATCH, v["x"], v["gates"])
    y = torch.einsum(DOWN, torch.relu(torch.einsum(UP, h, v["w1"])), v["w2"])
    return torch.einsum(COMBINE, y, v["gates"])
