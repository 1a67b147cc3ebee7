"""Integration tests run against the real kernel and need root."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root: run 'make test' (it uses sudo when not root)")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)
