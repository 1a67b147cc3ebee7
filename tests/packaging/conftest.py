"""Packaging tests run as root against the real system, as the integration
tests do: the same root check, clean-up on SIGTERM and private path memory.
The packages are built once a session, side by side (packages.py)."""

import pytest

from tests.integration.conftest import (  # noqa: F401 - pytest finds them here
    _clean_up_on_sigterm,
    _private_path_memory,
    pytest_collection_modifyitems,
)
from tests.packaging import packages


def pytest_collection_finish(session: pytest.Session) -> None:
    packages.plan({item.module for item in session.items if isinstance(item, pytest.Function)})


def pytest_sessionfinish(session: pytest.Session) -> None:
    packages.stop_all()  # a build whose tests were all skipped, or an interrupted one
