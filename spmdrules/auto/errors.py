"""The errors of ``spmdrules.auto``."""

from __future__ import annotations

from spmdrules.core.errors import SpmdError


class AutoPlanError(SpmdError, ValueError):
    """Bad input to ``auto.plan``: a device count, a size, a mesh shape or an objective."""


class MemoryBudgetError(AutoPlanError):
    """No plan on any mesh fits the memory budget; the message names the least it needs."""
