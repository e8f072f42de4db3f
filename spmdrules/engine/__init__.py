"""Layer 2, the rule engine: the Einsum and DimTrans descriptions that rules are written in, the
registry that binds Paddle's calling convention, and small helpers shared by rule families.

The rules themselves are ``spmdrules.rules`` (the repository's ``rules/`` folder), one module per op
family.
"""
