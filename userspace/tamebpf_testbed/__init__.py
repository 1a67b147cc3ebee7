"""A wide-area path on one machine: namespaces, an NFQUEUE link emulator
(bottleneck rate, queue and delay on a virtual clock), cross traffic. See
docs/testbed.md."""

from __future__ import annotations

from tamebpf_testbed.config import RedParams, TestbedConfig
from tamebpf_testbed.testbed import Testbed, teardown

__all__ = ["RedParams", "Testbed", "TestbedConfig", "teardown"]
