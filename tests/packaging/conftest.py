"""Packaging tests run as root against the real system, as the integration
tests do: the same root check, clean-up on SIGTERM and private path memory.
The packages are built once a session, in the background (packages.py)."""

from collections.abc import Iterator

import pytest

from tests.integration.conftest import (  # noqa: F401 - pytest finds them here
    _clean_up_on_sigterm,
    _private_path_memory,
    pytest_collection_modifyitems,
)
from tests.packaging import packages


def pytest_collection_finish(session: pytest.Session) -> None:
    packages.plan({item.module for item in session.items if isinstance(item, pytest.Function)})


@pytest.fixture(autouse=True, scope="session")
def _packages_build_meanwhile() -> Iterator[None]:
    """With the first packaging test, the packages the collected tests need
    start building; at the session's end, one whose tests were all skipped
    (or an interrupted one) is stopped."""
    packages.start_needed()
    yield
    packages.stop_all()
