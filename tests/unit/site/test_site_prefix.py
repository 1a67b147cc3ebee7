"""A site path's destination prefix."""

from __future__ import annotations

import pytest

from tamebpf.site.prefix import site_prefix


@pytest.mark.parametrize(("addr", "prefix"), [
    ("198.18.3.2", "198.18.3.0/24"),
    ("198.18.3.255", "198.18.3.0/24"),
    ("::ffff:198.18.3.2", "198.18.3.0/24"),
    ("fd74:6d65:6270:3::2", "fd74:6d65:6270:3::/64"),
    ("fe80::1%eth0", "fe80::/64"),
])
def test_an_address_is_its_sites_network(addr: str, prefix: str) -> None:
    assert site_prefix(addr) == prefix


@pytest.mark.parametrize("bad", ["", "dtn.example.org", "198.18.3.0/24", "300.1.1.1"])
def test_what_is_no_address_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        site_prefix(bad)
