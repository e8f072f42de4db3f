"""Random verification cases per op family: valid inputs for an op, on a random mesh, with random
given attributes (shards, co-shards, partials of every reduce type the dtype allows).

A :class:`Case` is what :mod:`spmdrules.verify` executes: the op whose local kernel runs, its
inputs as ``TensorSpec`` with the *given* attributes (the ones the rule is called with), its
outputs' global shapes (with given attributes too: the reverse rule is called on them), the op's
attributes with defaults filled, and the value domain of every input (ids must be in range, log
needs positive values, ...). Shapes and attributes follow each op's semantics; output shapes come
from :mod:`spmdrules.graph.shapes`, the graph's shape inference for every op.

``case`` holds the contract (``Case``, ``Draft``, the random draws), each family module one
generator (named as in ``rules/``), and ``drawing`` turns a family's draft into a case.

Cases are reproducible: :func:`draw_case` takes a generator seeded from (seed, op, direction,
index), so one op's cases do not depend on which other ops are drawn.

>>> import numpy as np
>>> case = draw_case("matmul", "forward", np.random.default_rng(0))
>>> case.op, len(case.inputs), len(case.outputs)
('matmul', 2, 1)
"""

from spmdrules.verify.cases.case import (
    FAMILIES,
    MESH_SHAPES,
    Arg,
    Case,
    Direction,
    DomainArg,
    Draft,
    NoCaseError,
    domain_dtype,
    draw_attr,
    draw_mesh,
    draw_values,
)
from spmdrules.verify.cases.drawing import (
    case_rng,
    draft_case,
    draw_case,
    is_gradient_rule,
)

__all__ = [
    "FAMILIES", "MESH_SHAPES", "Arg", "Case", "Direction", "DomainArg", "Draft", "NoCaseError",
    "case_rng", "domain_dtype", "draft_case", "draw_attr", "draw_case", "draw_mesh",
    "draw_values", "is_gradient_rule",
]
