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
``spmdrules.plan.apply`` for what each style reaches, ``spmdrules.plan.styles`` for the styles
and ``spmdrules.plan.hf`` for ``from_hf``, the plan a Hugging Face model carries.
"""

from spmdrules.plan.apply import AppliedPlan, apply, weight_use
from spmdrules.plan.errors import (
    PlanConflictError,
    PlanError,
    PlanTargetError,
    UnmatchedPatternError,
)
from spmdrules.plan.hf import HFPlan, HFPlanError, from_hf
from spmdrules.plan.patterns import matches
from spmdrules.plan.styles import (
    ColwiseParallel,
    DataParallel,
    Replicated,
    RowwiseParallel,
    SequenceParallel,
    Spatial,
    Spec,
    Style,
    Translated,
    VocabParallel,
)

__all__ = [
    "AppliedPlan",
    "ColwiseParallel",
    "DataParallel",
    "HFPlan",
    "HFPlanError",
    "PlanConflictError",
    "PlanError",
    "PlanTargetError",
    "Replicated",
    "RowwiseParallel",
    "SequenceParallel",
    "Spatial",
    "Spec",
    "Style",
    "Translated",
    "UnmatchedPatternError",
    "VocabParallel",
    "apply",
    "from_hf",
    "matches",
    "weight_use",
]
