"""The deviations from Paddle 3.3.1, one module per rule family; importing this registers them.

The families are imported in name order, as ``rules/`` is, which is the order in which
``classify`` tries their classes. The contract is :mod:`spmdrules.conformance.deviation`.
"""

from spmdrules.core.families import import_families

__all__ = import_families(__name__, __path__)
