"""A lost node found in seconds, not a minute: the kubelet's Lease watched like a controller.

Every kubelet renews its node's Lease in `kube-node-lease` every 10 s (leaseDurationSeconds /
4); Kubernetes' own node controller reads the same Leases and marks the node's Ready condition
Unknown only after its grace period (40-50 s). One watch per region on that namespace (not a
GET per node: one connection, re-opened from its last resourceVersion) tells this process each
renewal; a node none of whose renewals was seen for NODE_LEASE_QUIET_S (two missed in a row)
is down when its node agent is silent too: no report since that renewal, or none within
NODE_AGENT_QUIET_S, more than the agent's 15 s interval (node_lease_lost). So:
- a late renewal, or one late agent report, never takes a node down: the kubelet must miss
  two renewals and the agent must be silent too (a kubelet stuck while its agent still
  reports leaves the node to the heartbeat rule and to Kubernetes' own eviction);
- only the API server's word starts it: an agent (or its stolen token) can report only for
  its own node, so it can at most delay its own node's detection, never declare another lost;
- renewals are timed on this process's clock when seen (as the node controller does), not
  from the kubelet's renewTime, so clock skew between nodes does not count.
A node down tells its instances at once (fleet.services.node_transition): a job's rank moves.
"""

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from fleet.choices import NodeEventKind, NodeState
from fleet.models import Node
from fleet.services import node_transition
from starverse.core import kube
from starverse.core.errors import Conflict
from starverse.core.kube import KubeError, LeaseSeen

logger = logging.getLogger(__name__)
WATCH_S = 60  # one watch request's length: re-opened from its resourceVersion after it
CHECK_S = 1.0  # how often the renewals seen are checked for one overdue
RELIST_PAUSE_S = 1.0  # after a failed watch or list, before listing again


@dataclass
class _Renewal:
    renew_time: str
    seen_mono: float
    seen_at: datetime


class LeaseClock:
    """When each node's Lease was last seen renewed, on this process's clocks (thread-safe:
    the watch feeds it, the checker reads it)."""

    def __init__(self, quiet_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.quiet_s = quiet_s
        self.clock = clock
        self._seen: dict[str, _Renewal] = {}
        self._lock = threading.Lock()

    def observe(self, lease: LeaseSeen) -> None:
        with self._lock:
            known = self._seen.get(lease.node)
            if known is None or known.renew_time != lease.renew_time:
                self._seen[lease.node] = _Renewal(lease.renew_time, self.clock(), timezone.now())

    def overdue(self) -> list[tuple[str, float, datetime]]:
        """(node, seconds since its last renewal was seen, when that was) for each node past
        quiet_s."""
        now = self.clock()
        with self._lock:
            return [
                (node, now - seen.seen_mono, seen.seen_at)
                for node, seen in self._seen.items()
                if now - seen.seen_mono >= self.quiet_s
            ]


AGENT_REPORTS = "agent_reports"


def node_lease_lost(*, name: str, region: str, silent_s: float, renewed_at: datetime) -> str:
    """The node's kubelet has not renewed its Lease for `silent_s` (last seen at
    `renewed_at`): the node is down ("down"), unless its agent has reported since that
    renewal and within NODE_AGENT_QUIET_S (AGENT_REPORTS: the node lives and only its kubelet
    is stuck, left to the heartbeat rule; asked again each check while the lease is silent).
    "unchanged" for a node unknown here or already down."""
    node = Node.objects.filter(name=name, region_id=region).first()
    if node is None or node.state == NodeState.DOWN:
        return "unchanged"
    agent_quiet = timezone.now() - timedelta(seconds=settings.NODE_AGENT_QUIET_S)
    if node.last_report_at is not None and node.last_report_at > max(renewed_at, agent_quiet):
        return AGENT_REPORTS
    try:
        moved = node_transition(
            node=node,
            to=NodeState.DOWN,
            kind=NodeEventKind.HEARTBEAT,
            reason=f"node lost: its kubelet's lease not renewed for {int(silent_s)} s and no "
            "agent report since (node lease watch)",
        )
    except Conflict:  # it changed state meanwhile
        return "unchanged"
    if moved:
        logger.warning("fleet.node_lost node=%s silent_s=%d", name, silent_s)
    return "down" if moved else "unchanged"


def _watch(clock: LeaseClock, stop: threading.Event) -> None:
    """List the Leases, then watch them from the list's version; list again after an error
    (a version too old, the API server gone) until `stop`."""
    version = ""
    while not stop.is_set():
        try:
            if not version:
                version, leases = kube.node_leases()
                for lease in leases:
                    clock.observe(lease)
            for seen, lease in kube.node_leases_watch(version, timeout_s=WATCH_S):
                version = seen  # a watch re-opened goes on from here
                clock.observe(lease)
                if stop.is_set():
                    return
        except KubeError as error:
            logger.warning("fleet.lease_watch_failed error=%s", error)
            version = ""
            stop.wait(RELIST_PAUSE_S)


def node_leases_follow(*, region: str, stop: threading.Event, quiet_s: float = 0) -> None:
    """Follow a region's node Leases until `stop` (in the caller's kube.cluster context): one
    watch in a thread, and every CHECK_S the nodes overdue are judged (node_lease_lost)."""
    clock = LeaseClock(quiet_s or settings.NODE_LEASE_QUIET_S)
    context = contextvars.copy_context()  # the region's cluster, in the watch's thread too
    watcher = threading.Thread(target=context.run, args=(_watch, clock, stop), daemon=True)
    watcher.start()
    judged: dict[str, datetime] = {}  # a silence already judged for good (down, or gone)
    try:
        while not stop.wait(CHECK_S):
            close_old_connections()
            for node, silent_s, renewed_at in clock.overdue():
                if judged.get(node) == renewed_at:
                    continue
                outcome = node_lease_lost(
                    name=node, region=region, silent_s=silent_s, renewed_at=renewed_at
                )
                if outcome != AGENT_REPORTS:
                    judged[node] = renewed_at
    finally:
        stop.set()
        watcher.join(timeout=WATCH_S + 5)
        connection.close()
