"""Packaging tests run as root against the real system, as the integration
tests do: the same root check, clean-up on SIGTERM and private path memory."""

from tests.integration.conftest import (  # noqa: F401 - pytest finds them here
    _clean_up_on_sigterm,
    _private_path_memory,
    pytest_collection_modifyitems,
)
