"""Auto-sharding: the mesh and the annotations of the fastest plan within a memory budget.

>>> import spmdrules as sr
>>> from spmdrules import examples
>>> from spmdrules import auto
>>> g = examples.mlp(sr.ProcessMesh([[0, 1], [2, 3]]), batch=8, seq=16, hidden=32, ffn=64,
...                  annotate=False)
>>> p = auto.plan(g, 4, memory_per_rank="1GiB")
>>> p.mesh.size, p.predicted.memory_bytes <= p.budget
(4, True)

``candidates`` reads each op's strategies off its rule, ``pricing`` prices reshards with the
planner's steps, ``cost`` is the cost model, ``quotient`` folds repeated blocks, ``solver`` is
the MILP and ``search`` tries the meshes (docs/auto.md).
"""

from spmdrules.auto.cost import Estimate, Options
from spmdrules.auto.errors import AutoPlanError, MemoryBudgetError
from spmdrules.auto.search import AutoPlan, evaluate, mesh_shapes, parse_size, plan

__all__ = ["AutoPlan", "AutoPlanError", "Estimate", "MemoryBudgetError", "Options", "evaluate",
           "mesh_shapes", "parse_size", "plan"]
