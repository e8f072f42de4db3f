"""Conformance's deviation predicates read the rule families through public names only (issue 25:
no module reads another module's private names)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import spmdrules.conformance.deviations as deviations

#: the families whose predicates already go through public functions (elementwise and reduction
#: are moving to described rules on another branch)
PUBLIC_ONLY = ("matmul", "reshape", "concat_split", "conv", "fused_linear", "transpose")


@pytest.mark.parametrize("family", PUBLIC_ONLY)
def test_a_deviation_predicate_reads_no_private_rule_name(family: str) -> None:
    path = Path(deviations.__path__[0]) / f"{family}.py"
    private = [f"line {node.lineno}: _rules.{node.attr}"
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
               and node.value.id == "_rules" and node.attr.startswith("_")]
    assert private == [], f"{path.name} reads private names of its rules: {private}"
