"""One verification case on the simulated mesh: the rule's answer per argument of the case, then
:mod:`spmdrules.execution.single_op` runs it (scatter, the local kernels, gather, the comparison
with the serial result).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Literal

from spmdrules.core.attr import DistAttr
from spmdrules.core.spec import SpmdInfo, TensorSpec
from spmdrules.engine.registry import get_rule
from spmdrules.execution.domains import Values as Values
from spmdrules.execution.domains import draw_values_for as draw_values_for
from spmdrules.execution.local import Kernel
from spmdrules.execution.single_op import ATOL as ATOL
from spmdrules.execution.single_op import RTOL as RTOL
from spmdrules.execution.single_op import Collective as Collective
from spmdrules.execution.single_op import HarnessError as HarnessError
from spmdrules.execution.single_op import Rng as Rng
from spmdrules.execution.single_op import Slot as Slot
from spmdrules.execution.single_op import answer_slots, checked, unflatten
from spmdrules.execution.single_op import check_serial_shapes as check_serial_shapes
from spmdrules.execution.single_op import collective_for as collective_for
from spmdrules.execution.single_op import compare as compare
from spmdrules.execution.single_op import run_serial as run_serial
from spmdrules.execution.single_op import run_sharded as run_sharded
from spmdrules.execution.single_op import same_blocks as same_blocks
from spmdrules.verify.cases.case import Case

KernelLookup = Callable[[str], Kernel]
CaseStatus = Literal["ok", "wrong", "error", "nondeterministic"]

#: draws per case index before the case counts as refused (the rule rejects the given attributes)
MAX_DRAWS: Final = 20
#: sharded alternatives tried per mesh dim of one case (the search stops at the first that verifies)
MAX_ALTERNATIVES: Final = 16
#: examples kept per op and direction in the report
MAX_EXAMPLES: Final = 3


def answer(case: Case, info: SpmdInfo) -> tuple[list[Slot], list[Slot]]:
    """The inferred attribute of every input and output argument of ``case.op``."""
    if case.generic:
        return (checked(case.inputs, unflatten(case.inputs, info.inputs), "input"),
                checked(case.outputs, unflatten(case.outputs, info.outputs), "output"))
    rule = get_rule(case.rule)
    if not rule.inputs and len(info.outputs) == len(case.outputs):
        # a constant's forward rule leaves its result unplaced: the completion pass places it
        # replicated when no consumer asks otherwise, and so is it run here
        info = SpmdInfo(info.inputs, [
            DistAttr.replicated(case.mesh, t.ndim) if s is None and isinstance(t, TensorSpec)
            else s for s, t in zip(info.outputs, case.outputs, strict=True)])
    return answer_slots(case, info, rule.inputs, rule.outputs)
