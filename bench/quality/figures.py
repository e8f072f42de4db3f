"""A measured figure, a row of the table, and our byte convention for a collective
(``spmdrules.completion.reshard_plans``: the bytes every process sends with ring algorithms)."""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass

SEQ, DP, MP, FP32 = 32, 2, 2, 4


@dataclass
class Figure:
    """Forward bytes (our convention) and collectives, or why there are none."""

    bytes: int | None = None
    collectives: int | None = None
    reason: str = ""

    def cell(self) -> str:
        return f"{self.bytes:,} / {self.collectives}" if self.bytes is not None else "-"


@dataclass
class Row:
    model: str
    batch: int
    ours: Figure
    textbook: Figure
    dtensor: Figure
    #: a second textbook layout printed beside the table (the MoE's local dispatch), and its name
    alternative: Figure | None = None
    alternative_name: str = ""

    def ratio(self, other: Figure | None) -> float | None:
        if other is None or self.ours.bytes is None or other.bytes is None or other.bytes == 0:
            return None
        return self.ours.bytes / other.bytes


def reason_of(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:220] if lines else ''}"


def measured(fn: Callable[[], Figure]) -> Figure:
    """``fn()``, or its error as the reason (any error: a row never stops the run)."""
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            return fn()
    except Exception as e:
        return Figure(reason=reason_of(e))


def all_reduce_bytes(block_bytes: int, n: int) -> int:
    return 2 * (n - 1) * block_bytes // n


def collective_bytes(op: str, block_bytes: int, n: int) -> int:
    """One process's bytes for a collective of ``op`` on its ``block_bytes`` input (module docs
    of bench/plan_quality.py); an unknown collective is an error, never a guess."""
    if op == "all_reduce":
        return all_reduce_bytes(block_bytes, n)
    if op == "all_gather_into_tensor":
        return (n - 1) * block_bytes  # (n-1)/n of the gathered block, n times the input
    if op in ("reduce_scatter_tensor", "all_to_all_single", "shard_dim_alltoall"):
        return (n - 1) * block_bytes // n
    raise ValueError(f"collective {op!r}: no conversion to our convention; add it to "
                     "bench/quality/figures.py collective_bytes")
