"""The example plugin, installed into the test environment if it is not yet (``make test``'s
bootstrap installs it; a fresh clone's first ``pytest`` does it here)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from spmdrules.core.plugins import GROUP

PLUGIN = Path(__file__).parent / "spmdrules_example_op"
MODULE = "spmdrules_example_op"


def _installed() -> bool:
    return any(ep.value == MODULE for ep in entry_points(group=GROUP))


@pytest.fixture(scope="session")
def example_plugin() -> str:
    """The entry point's module, once the distribution that declares it is installed."""
    if not _installed():
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                        "--no-build-isolation", "-e", str(PLUGIN)], check=True, timeout=300)
        importlib.invalidate_caches()
    assert _installed(), f"pip installed {PLUGIN}, yet no entry point of {GROUP} names {MODULE}"
    return MODULE
