"""``python -m spmdrules.verify``: every registered rule proven by execution.

For each rule, forward and reverse, on random cases (:mod:`spmdrules.verify.cases`):

1. call the rule on random given attributes (reverse: random output attributes);
2. scatter random global inputs by the rule's inferred *input* attributes (partials become
   pieces that reduce back to the value);
3. run the op's local kernel (:mod:`spmdrules.execution.local`) on every mesh coordinate;
4. gather every output by the rule's inferred *output* attribute (replicas must agree, block
   shapes must match, partials are reduced with their reduce type);
5. compare with the serial result: the same kernel on a 1-process mesh, everything replicated.

A case is **wrong** when the gathered output differs from the serial one (or cannot be gathered:
replica mismatch, bad block shape). A correct case is **over-replicated** when a sharded
alternative also computes the right answer with less communication; see docs/verify.md for the
precise definition and how the alternatives are enumerated.

``<op>_grad`` rules run on their backward op (``bmm_grad``: x, y and the output's cotangent in,
the cotangents of x and y out) on cases drawn for the forward op; generic rules (``default_``,
``default_data_parallel``, ``replicated``) run on stand-in ops whose semantics they claim to cover.

The modules: ``simulation`` (one case on the simulated mesh), ``alternatives`` (over-replication),
``runner`` (cases, directions, ops), ``report`` (totals and formats), ``cli`` and ``cases/``.
"""

from spmdrules.verify.cli import main
from spmdrules.verify.report import format_text, markdown_table, to_json, totals
from spmdrules.verify.runner import (
    CaseResult,
    DirectionReport,
    OpReport,
    run_case,
    verify,
    verify_direction,
    verify_op,
)
from spmdrules.verify.simulation import HarnessError, collective_for, run_serial, run_sharded

__all__ = [
    "CaseResult",
    "DirectionReport",
    "HarnessError",
    "OpReport",
    "collective_for",
    "format_text",
    "main",
    "markdown_table",
    "run_case",
    "run_serial",
    "run_sharded",
    "to_json",
    "totals",
    "verify",
    "verify_direction",
    "verify_op",
]
