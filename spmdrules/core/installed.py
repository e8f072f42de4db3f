"""Where the op rules are: refused on import when this ``spmdrules`` cannot reach them.

The repository keeps the families in ``rules/`` at its root; only an install (regular or
editable, pyproject's ``package-dir``) makes that folder ``spmdrules.rules``. Run from the root
of a clone with a regular install, the current directory comes first on ``sys.path``: the
clone's ``spmdrules/`` shadows the installed one and has no ``rules`` inside. Every layer reads
the rules, so the first import of any of them would fail with a bare ``ModuleNotFoundError``;
this module, the first that ``spmdrules`` imports, names the cause and the fix instead.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Final

from spmdrules.core.errors import RulesImportError

RULES_PACKAGE: Final = "spmdrules.rules"

if importlib.util.find_spec(RULES_PACKAGE) is None:
    _tree = Path(__file__).resolve().parents[2]
    raise RulesImportError(
        f"spmdrules was imported from the source tree {_tree}, which comes before the installed "
        "package on sys.path (the current directory or PYTHONPATH) and does not hold its rules: "
        "the tree's rules/ folder becomes spmdrules.rules only when installed. Run from outside "
        f"the tree, or install the tree editable (pip install -e {_tree})"
    )

__all__ = ["RULES_PACKAGE"]
