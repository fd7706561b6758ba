"""Local Kubernetes API emulator: a development stand-in for a cluster of GPU nodes.

``KubeEmulator`` serves an apiserver-shaped HTTP API on 127.0.0.1 that the official
``kubernetes`` client and ``kubectl`` use unchanged, with an emulated scheduler, kubelets and
controllers. It is for ``make run`` and tests only — never a way to run production.
"""

from .emulator import KubeEmulator
from .fleet import DEFAULT_FLEET, PROFILES, NodeSpec, build_fleet, parse_fleet

__all__ = ["DEFAULT_FLEET", "PROFILES", "KubeEmulator", "NodeSpec", "build_fleet", "parse_fleet"]
