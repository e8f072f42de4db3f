"""The shipped cases, compared once per session and shared by the conformance tests."""

from __future__ import annotations

import pytest
from recorded import Compared, compare_shipped


@pytest.fixture(scope="session")
def compared() -> Compared:
    return compare_shipped()
