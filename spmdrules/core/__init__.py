"""Layer 1, distributed attributes: the process mesh, DistAttr and placements, the spec a rule
receives and returns, the typed errors, and blocks (scatter and gather a global array by a DistAttr).

It imports nothing else of spmdrules.
"""
