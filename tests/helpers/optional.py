"""Tests of an optional package (requirements-optional.txt) skipped where it is not installed, without importing it
while the tests are collected: each worker collects every file, and importing inspect_ai took 2.3 s of each."""

from importlib.util import find_spec

import pytest

INSPECT = "inspect-ai is not installed (pip install -r requirements-optional.txt)"


def needs(package: str, reason: str) -> pytest.MarkDecorator:
    """Skip where `package` is not installed."""
    return pytest.mark.skipif(find_spec(package) is None, reason=reason)
