"""Value domains: the random global values an op's inputs are drawn from to run its kernel.

A domain is a name: ``real`` (standard normal), ``positive``, ``unit`` (inside (-1, 1)), ``prob``,
``ge1``, ``nonzero`` and ``near1`` (safe divisors and factors), ``bool`` (``bool:P``: True with
probability P), ``int``; ``index:N``
(int64 ids in [0, N)), ``boxes:H:W`` (roi boxes about an H x W image) and ``counts:N:R`` (N
counts that sum to R). A tensor argument's domain has the argument's structure: a name, None for
an absent optional, a tuple for a list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from spmdrules.core.spec import TensorSpec

Rng = np.random.Generator
Array = NDArray[Any]
Shape = tuple[int, ...]
#: one tensor argument: a tensor, an absent optional (None) or a list
Arg = TensorSpec | None | tuple[TensorSpec, ...]
#: the value domain of one tensor argument, in the same structure
DomainArg = str | None | tuple[str, ...]
#: the global values of one tensor argument, in the same structure
Values = Array | list[Array] | None

#: domain name -> dtype name; "index:N" domains (ids, hard labels) are int64 in [0, N)
_DOMAIN_DTYPES: Final[Mapping[str, str]] = {
    "real": "float64", "positive": "float64", "unit": "float64", "prob": "float64",
    "ge1": "float64", "nonzero": "float64", "near1": "float64", "bool": "bool", "int": "int64",
}


def domain_dtype(domain: str) -> str:
    if domain.startswith(("index:", "counts:")):
        return "int64"
    if domain.startswith("bool:"):
        return "bool"
    return "float64" if domain.startswith("boxes:") else _DOMAIN_DTYPES[domain]


def draw_values(domain: str, shape: Shape, rng: Rng) -> Array:
    """A random global array of ``shape`` in ``domain`` (an ndarray even when 0-d)."""
    return np.asarray(_values(domain, shape, rng), dtype=domain_dtype(domain))


def _values(domain: str, shape: Shape, rng: Rng) -> Any:
    if domain == "real":
        return rng.standard_normal(shape)
    if domain == "positive":
        return rng.uniform(0.5, 2.0, shape)
    if domain == "unit":
        return rng.uniform(-0.9, 0.9, shape)
    if domain == "prob":
        return rng.uniform(0.1, 0.9, shape)
    if domain == "ge1":
        return rng.uniform(1.1, 3.0, shape)
    if domain in ("nonzero", "near1"):
        # |v| in [0.5, 1.5]: safe divisors, and products of many stay O(1)
        return rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
    if domain == "bool":
        return np.asarray(rng.integers(0, 2, shape) > 0)
    if domain.startswith("bool:"):  # "bool:P": True with probability P
        return np.asarray(rng.random(shape) < float(domain[5:]))
    if domain == "int":
        return rng.integers(-8, 8, shape).astype(np.int64)
    if domain.startswith("index:"):
        return rng.integers(0, int(domain[6:]), shape).astype(np.int64)
    if domain.startswith("boxes:"):  # "boxes:H:W": boxes x1, y1, x2, y2 about an H x W image
        h, w = (int(v) for v in domain.split(":")[1:])
        lo = rng.uniform(-0.5, 1.0, (shape[0], 2)) * np.array([w, h]) * 0.8
        size = rng.uniform(0.3, 1.2, (shape[0], 2)) * np.array([w, h])
        return np.concatenate([lo, lo + size], axis=1)
    if domain.startswith("counts:"):  # "counts:N:R": N counts that sum to R (boxes per image)
        n, total = (int(v) for v in domain.split(":")[1:])
        cuts = np.sort(rng.integers(0, total + 1, n - 1))
        return np.diff(np.concatenate([[0], cuts, [total]])).astype(np.int64)
    raise ValueError(f"unknown value domain {domain!r}")


def draw_values_for(domain: DomainArg, arg: Arg, rng: Rng) -> Values:
    """Random global values for one tensor argument (None for an absent one)."""
    if arg is None or domain is None:
        return None
    if isinstance(arg, TensorSpec):
        assert isinstance(domain, str)
        return draw_values(domain, arg.shape, rng)
    assert isinstance(domain, tuple)
    return [draw_values(d, t.shape, rng) for d, t in zip(domain, arg, strict=True)]
