"""
Fixtures for the group coordinator tests.
"""

from __future__ import annotations

import pytest

from .helpers import Harness


@pytest.fixture
def h() -> Harness:
    return Harness()


@pytest.fixture
def harness():
    return Harness
