"""The host's tamebpf settings file: /etc/tamebpf/tamebpf.toml
($TAMEBPF_CONFIG to read another), for what a site sets once for every
user of the host rather than on each command line.

    [advise]
    paths_from = "http://prometheus.example:9090"   # advise --paths-from

    [site]
    prometheus = "http://prometheus.example:9090"   # --site: the site's Prometheus
    node = "dtn1"                                   # --node: this node's name there

A command-line option wins over the environment, which wins over this file.
A missing file is no settings; an unreadable or malformed one is an error
that names the file, the key and what to do.
"""

from __future__ import annotations

import os
import socket
import tomllib
from typing import Any

from tamebpf.common.errors import UsageError
from tamebpf.common.values import parse_node

CONFIG_PATH = "/etc/tamebpf/tamebpf.toml"
CONFIG_ENV = "TAMEBPF_CONFIG"
KNOWN = {"advise": {"paths_from"}, "site": {"prometheus", "node"}}


def config_path() -> str:
    return os.environ.get(CONFIG_ENV) or CONFIG_PATH


def load(path: str | None = None) -> dict[str, dict[str, Any]]:
    path = path or config_path()
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise UsageError(f"cannot read {path}: {err.strerror}",
                         f"fix its permissions, or point ${CONFIG_ENV} elsewhere") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise UsageError(f"{path}: not valid TOML ({err})", "fix the file") from None
    for table, value in data.items():
        if table not in KNOWN or not isinstance(value, dict):
            raise UsageError(f"{path}: unknown table [{table}]",
                             f"known tables: {', '.join(f'[{t}]' for t in sorted(KNOWN))}")
        unknown = set(value) - KNOWN[table]
        if unknown:
            raise UsageError(f"{path}: [{table}] has unknown key(s) {', '.join(sorted(unknown))}",
                             f"known keys: {', '.join(sorted(KNOWN[table]))}")
    return data


def setting(table: str, key: str) -> str | None:
    """A string setting, or None when the file does not set it."""
    value = load().get(table, {}).get(key)
    if value is not None and not isinstance(value, str):
        raise UsageError(f"{config_path()}: [{table}] {key} must be a string, got {value!r}")
    return value


def site_url(given: str | None) -> str | None:
    """--site when given, else [site] prometheus (None: no site)."""
    return given if given is not None else setting("site", "prometheus")


def node_name(given: str | None) -> str:
    """--node; else [site] node; else the host name. Each is checked as a
    node name, naming where it came from."""
    if given is not None:
        return parse_node(given, "--node")
    configured = setting("site", "node")
    if configured is not None:
        return parse_node(configured, f"--node ([site] node in {config_path()})")
    return parse_node(socket.gethostname(), "--node (the host name)",
                      f"give --node NAME, or set [site] node in {config_path()}")
