"""Integration tests run against the real kernel and need root."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.integration.kernel_fixtures import Net, bpf_pin_dir, cap_net, cgroup, term_as_interrupt


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root: run 'make test' (it uses sudo when not root)")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _clean_up_on_sigterm() -> Iterator[None]:
    """A CI time-out or a kill sends SIGTERM: turn it into an interrupt so
    every fixture's clean-up (detach, unpin, rmdir, netns del) still runs."""
    with term_as_interrupt():
        yield


@pytest.fixture(autouse=True)
def _private_path_memory(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
                         ) -> None:
    """Each test gets its own path memory (docs/paths.md): testbeds reuse
    addresses and namespace names, so one test's advice must not answer the
    next test's advise, and no test writes to /var/lib/tamebpf."""
    monkeypatch.setenv("TAMEBPF_STATE_DIR", str(tmp_path_factory.mktemp("state") / "state"))


@pytest.fixture
def pins(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A private bpffs pin directory, so a test never touches a real cap."""
    with bpf_pin_dir() as path:
        monkeypatch.setenv("TAMEBPF_PIN_DIR", path)
        yield path


@pytest.fixture
def cg() -> Iterator[str]:
    """A fresh cgroup v2 directory, emptied and removed afterwards."""
    with cgroup() as path:
        yield path


@pytest.fixture(scope="module")
def net() -> Iterator[Net]:
    """The cap tests' netns pair and connection-holding server, one per module."""
    with cap_net() as pair:
        yield pair
