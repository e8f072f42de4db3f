"""Parallelization plans: annotate a graph by name pattern, the way DTensor users already do.

>>> import spmdrules as sr
>>> from spmdrules import examples, plan
>>> mesh = sr.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
>>> g = examples.mlp(mesh, batch=4, seq=8, hidden=16, ffn=32, annotate=False)
>>> _ = plan.apply(g, mesh, {"x": plan.DataParallel(dim="dp"), "fc1": plan.ColwiseParallel(),
...                          "fc2": plan.RowwiseParallel()})
>>> g.tensor("fc1.weight").annotation.source
"plan entry 'fc1': ColwiseParallel(dim='mp')"

See ``spmdrules.plan.patterns`` for the keys (a name, or else a glob),
``spmdrules.plan.apply`` for what each style reaches and ``spmdrules.plan.styles`` for the styles.
"""

from spmdrules.plan.apply import AppliedPlan, apply, weight_use
from spmdrules.plan.errors import (
    PlanConflictError,
    PlanError,
    PlanTargetError,
    UnmatchedPatternError,
)
from spmdrules.plan.patterns import matches
from spmdrules.plan.styles import (
    ColwiseParallel,
    DataParallel,
    RowwiseParallel,
    SequenceParallel,
    Spatial,
    Spec,
    Style,
    VocabParallel,
)

__all__ = [
    "AppliedPlan",
    "ColwiseParallel",
    "DataParallel",
    "PlanConflictError",
    "PlanError",
    "PlanTargetError",
    "RowwiseParallel",
    "SequenceParallel",
    "Spatial",
    "Spec",
    "Style",
    "UnmatchedPatternError",
    "VocabParallel",
    "apply",
    "matches",
    "weight_use",
]
