"""Typed errors of parallelization plans: each names the plan entry, the tensor and the fix."""

from __future__ import annotations

from spmdrules.core.errors import SpmdError


class PlanError(SpmdError, ValueError):
    """Base of every error about a parallelization plan."""


class UnmatchedPatternError(PlanError):
    """A plan entry's pattern names no tensor or module of the graph (never a silent no-op)."""


class PlanTargetError(PlanError):
    """A style does not fit what its pattern matched (ColwiseParallel on a tensor no matmul or
    embedding reads as a weight, a raw spec on a module, ...)."""


class PlanConflictError(PlanError):
    """Two plan entries (or a plan and an earlier ``shard``) ask different layouts of a tensor."""
