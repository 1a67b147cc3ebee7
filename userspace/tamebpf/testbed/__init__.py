"""A wide-area path on one machine: namespaces, a TBF bottleneck, an NFQUEUE
delay line, cross traffic. See docs/testbed.md."""

from __future__ import annotations

from tamebpf.testbed.config import RedParams, TestbedConfig
from tamebpf.testbed.testbed import Testbed, teardown

__all__ = ["RedParams", "Testbed", "TestbedConfig", "teardown"]
