"""The op rules, one module per family. Importing this package registers them all.

The package is ``spmdrules.rules`` (pyproject's ``package-dir``), never a top-level ``rules``: that
name belongs to an unrelated project on PyPI, and where the repository's root is on ``sys.path``
it would import every family a second time, registering each rule twice. It is refused before
any family is imported.
"""

from spmdrules.core.errors import RulesImportError
from spmdrules.core.families import import_families

if __name__ != "spmdrules.rules":
    raise RulesImportError(
        f"the op rules were imported as the top-level package {__name__.split('.')[0]!r} (from "
        f"{__path__[0]}); they are the package 'spmdrules.rules': write `import spmdrules.rules` "
        "(or `python -m spmdrules.rules`). A top-level 'rules' is an unrelated PyPI project, and "
        "importing this folder under that name would register every rule a second time"
    )

__all__ = import_families(__name__, __path__)
