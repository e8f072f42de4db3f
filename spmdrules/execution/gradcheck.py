"""Gradients checked against numerical derivatives of the serial model.

The reference is the graph run serially in numpy (:func:`spmdrules.execution.executor.run_serial`), with the
objective ``sum over seeded outputs of <seed, output>`` (for a scalar loss seeded with 1.0, the
loss). Its derivative along a direction comes from central differences with one step of
Richardson extrapolation (error of order step^4), in float64. A gradient ``g`` of tensor ``t``
passes when, for random directions ``v`` and for sampled entries, the numerical derivative agrees
with ``<g, v>`` to ``tolerance`` relative to ``|g| |v|``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from spmdrules.execution.executor import run_serial
from spmdrules.graph.graph import Graph

Array = NDArray[Any]


def objective(graph: Graph, feeds: Mapping[str, Array], seeds: Mapping[str, Any]) -> float:
    """``sum over t of <seeds[t], value of t>`` for the graph run serially."""
    values = run_serial(graph, feeds)
    return float(sum(np.sum(np.asarray(s) * values[t]) for t, s in seeds.items()))


def directional_derivative(graph: Graph, feeds: Mapping[str, Array], seeds: Mapping[str, Any],
                           wrt: str, direction: Array, step: float = 1e-4) -> float:
    """d objective / d feeds[wrt] along ``direction`` (central differences, Richardson)."""
    base = np.asarray(feeds[wrt], dtype=np.float64)

    def central(h: float) -> float:
        plus, minus = dict(feeds), dict(feeds)
        plus[wrt], minus[wrt] = base + h * direction, base - h * direction
        return (objective(graph, plus, seeds) - objective(graph, minus, seeds)) / (2 * h)

    return (4 * central(step / 2) - central(step)) / 3


@dataclass(frozen=True, slots=True)
class GradCheck:
    """One comparison: the analytic and numerical derivative of ``tensor`` along a direction
    (``what``: "direction k" or "entry (i, j, ...)"), and their difference relative to
    ``|g| |v|``."""

    tensor: str
    what: str
    analytic: float
    numerical: float
    error: float


def check_gradients(graph: Graph, feeds: Mapping[str, Array], seeds: Mapping[str, Any],
                    grads: Mapping[str, Array], *, directions: int = 1, entries: int = 2,
                    seed: int = 0, names: Sequence[str] | None = None) -> list[GradCheck]:
    """Compare ``grads`` (tensor name -> gradient) with numerical derivatives of the serial
    model: ``directions`` random directions and ``entries`` random entries per tensor."""
    rng = np.random.default_rng(seed)
    out: list[GradCheck] = []
    for t in names if names is not None else sorted(grads):
        g = np.asarray(grads[t], dtype=np.float64)
        probes: list[tuple[str, Array]] = []
        for k in range(directions):
            # unit length, so the difference step is the same size in every tensor
            v = rng.standard_normal(g.shape)
            probes.append((f"direction {k}", v / (np.linalg.norm(v) or 1.0)))
        for _ in range(min(entries, g.size)):
            idx = tuple(int(rng.integers(n)) for n in g.shape)
            e = np.zeros(g.shape)
            e[idx] = 1.0
            probes.append((f"entry {idx}", e))
        for what, v in probes:
            ana = float(np.sum(g * v))
            num = directional_derivative(graph, feeds, seeds, t, v)
            scale = float(np.linalg.norm(g) * np.linalg.norm(v)) or 1.0
            out.append(GradCheck(t, what, ana, num, abs(ana - num) / scale))
    return out


__all__ = ["GradCheck", "check_gradients", "directional_derivative", "objective"]
