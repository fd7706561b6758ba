"""A cluster's pre-flight check, before billing starts (docs/user-guide.md "Clusters": the
pre-flight check). Once every rank is up (checking, unbilled), the worker runs the images'
`/opt/starverse/bin/starverse-preflight --json` in rank 0's container (an NCCL all-reduce across
every rank, then between pairs of nodes) and judges the result against the offering's floor:

- passed: every rank runs, and is billed, from the same moment (instances.states
  ranks_mark_running);
- failed: the rank whose node drags it down moves to another free whole node
  (clusters.ranks.rank_replace) and the check runs again once it is up; a round that gives
  no result (a timeout, a non-zero exit, output that is not a result) fails too, and runs again
  on the same nodes. After CLUSTER_PREFLIGHT_MAX_ROUNDS failed rounds the cluster fails, never
  billed.

The check runs in the tenant's container, where the tenant is root: its result is the tenant's
word. So it never takes a node out of service by itself: the node it blames is cordoned only
when the node agent's own reports agree (fleet.selectors.node_agent_fault), else put up for an
operator's review (fleet.services.node_review_request) and left in service. A forged result can
move the tenant's own ranks and fail the tenant's own cluster, nothing else.

Each round is a Preflight row and a line on the cluster's timeline (rank 0's events). The exec
runs outside any transaction; a round whose cluster changed meanwhile (a rank stopped, moved or
was lost), or that the cluster's API cut short, is abandoned, and the next one starts when every
rank is checking again. A round holds a lease (CLUSTER_PREFLIGHT_LEASE_S) that its worker renews
while the check runs: a round whose worker was killed is abandoned once its lease ran out, and
the task the reconcile loop hands out again starts the next. However its rounds end, a cluster
checking for longer than CLUSTER_CHECKING_MAX_MINUTES in all fails and gives its GPUs back."""

import json
import logging
import math
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from clusters.models import Cluster, Preflight, PreflightStatus
from clusters.ranks import number, rank_replace, ranks_locked
from events.choices import EventType
from events.emit import emit_about
from events.selectors import recovered_or
from fleet.choices import NodeState
from fleet.models import Node
from fleet.selectors import node_agent_fault
from fleet.services import node_cordon, node_review_request
from instances.choices import InstanceStatus
from instances.models import Instance, InstanceEvent
from instances.states import (
    instance_fail,
    rank_mark_checking,
    ranks_mark_running,
)
from starverse.core import kube
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.text import Deferred, later

logger = logging.getLogger(__name__)
S = InstanceStatus
P = PreflightStatus
# By its absolute path (install.sh links it there), so no program earlier on the container's
# PATH stands in for it. The tenant, root in the container, can still replace the file itself:
# what it prints is only ever read as the tenant's word (see the module's docstring).
PROGRAM = "/opt/starverse/bin/starverse-preflight"
COMMAND = [PROGRAM, "--json"]
CONTAINER = "main"
# What the node agent reported this long before a round counts as agreeing with it.
AGENT_WINDOW = timedelta(hours=1)
AGAIN_AFTER_S = 30  # a failed round that named no node runs again on the same nodes
OUTPUT_TAIL = 300  # characters of what the check printed, kept with a failed round


def preflight_run(cluster_id: str) -> str | None:
    """Run a round if every rank of the cluster is checking and none runs: returns its status
    (passed, failed or abandoned), or None when no round was due (or the cluster has now been
    checking too long and failed: checking_cap_enforce). A retryable cluster error abandons the
    round and propagates, so the retrying task starts a new one."""
    if checking_cap_enforce(cluster_id):
        return None
    found = _round_start(cluster_id)
    if found is None:
        return None
    head = Instance.objects.get(cluster_rank__cluster_id=cluster_id, cluster_rank__index=0)
    words = {"round": found.round}
    try:
        code, output = kube.exec_run(
            head.k8s_namespace,
            head.k8s_name,
            container=CONTAINER,
            command=COMMAND,
            timeout=settings.CLUSTER_PREFLIGHT_TIMEOUT_S,
            beat=lambda: round_lease_renew(found.pk),
            beat_every=settings.CLUSTER_PREFLIGHT_LEASE_S / 3,
        )
    except kube.RetryableKubeError:
        Preflight.objects.filter(pk=found.pk, status=P.RUNNING).update(
            status=P.ABANDONED, finished_at=timezone.now()
        )
        raise
    except kube.ExecTimeout:
        error = later(
            "Pre-flight check round %(round)s failed: no result within %(s)s s. It counts as a "
            "failed round."
        ) % {**words, "s": settings.CLUSTER_PREFLIGHT_TIMEOUT_S}
        return round_record(found.pk, None, error=error)
    except kube.PermanentKubeError as failure:
        error = later("Pre-flight check round %(round)s could not run: %(error)s.") % {
            **words,
            "error": str(failure),
        }
        return round_record(found.pk, None, error=error)
    result = result_parse(output, nodes=len(found.nodes)) if code == 0 else None
    if result is not None:
        return round_record(found.pk, result)
    tail = output.strip()[-OUTPUT_TAIL:]
    if code == 0:
        error = later(
            "Pre-flight check round %(round)s failed: what it printed is not a pre-flight "
            "result (%(output)s). It counts as a failed round."
        ) % {**words, "output": tail}
    else:
        error = later(
            "Pre-flight check round %(round)s failed: it exited with code %(code)s "
            "(%(output)s). It counts as a failed round."
        ) % {**words, "code": code, "output": tail}
    return round_record(found.pk, None, error=error)


# The check's result is parsed JSON: its values are Any until the functions below check them.
def _gbps(value: Any) -> float | None:
    """A bandwidth as the check prints it: a finite number, not negative (JSON's NaN and
    Infinity, booleans and text are not bandwidths)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _rank(value: Any, nodes: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < nodes:
        return None
    return value


def _pair(item: Any, nodes: int) -> dict[str, Any] | None:
    if not isinstance(item, dict) or not isinstance(item.get("ranks"), list):
        return None
    ranks = [_rank(value, nodes) for value in item["ranks"]]
    hosts = item.get("hosts")
    number, gbps = item.get("round"), _gbps(item.get("busbw_gbps"))
    if len(ranks) != 2 or None in ranks or ranks[0] == ranks[1] or gbps is None:
        return None
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        return None
    if not isinstance(hosts, list) or not all(isinstance(h, str) and len(h) <= 253 for h in hosts):
        return None
    return {"round": number, "ranks": ranks, "hosts": hosts[:2], "busbw_gbps": gbps}


def _result_clean(found: dict[str, Any], nodes: int) -> dict[str, Any] | None:
    """The result's fields the platform reads, checked (ranks those of a cluster of `nodes`
    nodes, each node once), or None if any is malformed."""
    busbw = _gbps(found.get("busbw_gbps"))
    listed, paired = found.get("per_node", []), found.get("pairs", [])
    if busbw is None or not isinstance(listed, list) or not isinstance(paired, list):
        return None
    per_node = []
    for item in listed:
        if not isinstance(item, dict):
            return None
        rank, best = _rank(item.get("rank"), nodes), _gbps(item.get("best_gbps"))
        if rank is None or best is None:
            return None
        per_node.append({"rank": rank, "best_gbps": best})
    pairs = [_pair(item, nodes) for item in paired]
    if len({node["rank"] for node in per_node}) != len(per_node) or None in pairs:
        return None
    return {"busbw_gbps": busbw, "per_node": per_node, "pairs": pairs}


def result_parse(output: str, *, nodes: int) -> dict[str, Any] | None:
    """The result `starverse-preflight --json` printed for a cluster of `nodes` nodes (the
    last line that is a JSON object with `busbw_gbps`), checked field by field, or None when
    there is none or it is malformed. It comes from the tenant's container: it is read as data
    and never trusted further than its shape."""
    for line in reversed(output.strip().splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict) and "busbw_gbps" in found:
            return _result_clean(found, nodes)
    return None


def round_lease_renew(round_id: int) -> bool:
    """The worker running a round is alive: its lease runs CLUSTER_PREFLIGHT_LEASE_S from now.
    Only a round still running (not taken over as abandoned meanwhile) is renewed; returns
    whether it was."""
    lease = timezone.now() + timedelta(seconds=settings.CLUSTER_PREFLIGHT_LEASE_S)
    renewed = Preflight.objects.filter(pk=round_id, status=P.RUNNING).update(lease_until=lease)
    return renewed == 1


def _rounds_lost_abandon(cluster_id: str, now: datetime) -> None:
    """Running rounds whose worker died (kill -9, a lost node) are abandoned: their lease ran
    out (the live worker renews it while the check runs), or, for a round begun before leases,
    they started longer than twice the timeout ago. Called under the ranks' locks, so two
    workers never both take a round over and start the next."""
    stale = now - timedelta(seconds=2 * settings.CLUSTER_PREFLIGHT_TIMEOUT_S)
    lost = Preflight.objects.filter(cluster_id=cluster_id, status=P.RUNNING).filter(
        Q(lease_until__lt=now) | Q(lease_until__isnull=True, started_at__lt=stale)
    )
    for found in lost.only("round"):
        logger.warning("cluster.preflight_lost cluster=%s round=%d", cluster_id, found.round)
    lost.update(status=P.ABANDONED, finished_at=now)


def _round_start(cluster_id: str) -> Preflight | None:
    """A new round's row, when every rank is checking (or, ranks that came up again beside
    running ones, once those are paused) and no round runs (a round whose worker died is
    abandoned first: _rounds_lost_abandon). The cluster's first round since it was started or
    last passed starts its time in checking."""
    with transaction.atomic():
        ranks = ranks_locked(cluster_id)
        waiting = [rank for rank in ranks if rank.status == S.CHECKING]
        if not waiting or any(rank.status not in (S.CHECKING, S.RUNNING) for rank in ranks):
            return None
        _pause_for(ranks, waiting)
        now = timezone.now()
        _rounds_lost_abandon(cluster_id, now)
        rounds = Preflight.objects.filter(cluster_id=cluster_id)
        if rounds.filter(status=P.RUNNING).exists():
            return None
        Cluster.objects.filter(pk=cluster_id, checking_since__isnull=True).update(
            checking_since=now
        )
        last = rounds.order_by("-round").values_list("round", flat=True).first() or 0
        found = Preflight.objects.create(
            cluster_id=cluster_id,
            round=last + 1,
            floor_gbps=ranks[0].offering.preflight_floor_gbps,
            nodes={str(number(rank)): rank.node_id for rank in ranks},
            started_at=now,
            lease_until=now + timedelta(seconds=settings.CLUSTER_PREFLIGHT_LEASE_S),
        )
        InstanceEvent.objects.create(
            instance=ranks[0],
            status=S.CHECKING,
            message=later(
                "Pre-flight check, round %(round)s: an NCCL all-reduce across all %(n)s nodes "
                "and between pairs of them."
            )
            % {"round": found.round, "n": len(ranks)},
        )
    logger.info("cluster.preflight_started cluster=%s round=%d", cluster_id, found.round)
    return found


def _pause_for(ranks: list[Instance], waiting: list[Instance]) -> None:
    """Ranks came up again (their pods were recreated) while the others ran: the cluster runs
    only as a whole, so the others' billing pauses (their closed minutes charged) and the check
    covers them all."""
    now = timezone.now()
    for rank in ranks:
        if rank.status == S.RUNNING:
            rank_mark_checking(
                rank,
                later(
                    "Rank %(ranks)s came up again: billing paused for the whole cluster until "
                    "the pre-flight check passes again."
                )
                % {"ranks": ", ".join(str(number(found)) for found in waiting)},
                now=now,
            )


def checking_cap_enforce(cluster_id: str) -> bool:
    """A cluster whose ranks have been checking for longer than CLUSTER_CHECKING_MAX_MINUTES
    since its first round (since it was started or last passed; across rounds, abandoned ones
    and a moved rank's wait in the queue included) fails, and every rank gives its GPUs back:
    however its rounds end, a cluster never holds GPUs unbilled for longer. Checking was never
    billed. True if it failed now."""
    with transaction.atomic():
        ranks = ranks_locked(cluster_id)
        since = Cluster.objects.values_list("checking_since", flat=True).get(pk=cluster_id)
        minutes = settings.CLUSTER_CHECKING_MAX_MINUTES
        if since is None or not any(rank.status == S.CHECKING for rank in ranks):
            return False
        if timezone.now() - since < timedelta(minutes=minutes):
            return False
        Preflight.objects.filter(cluster_id=cluster_id, status=P.RUNNING).update(
            status=P.ABANDONED, finished_at=timezone.now()
        )
        words = {"n": minutes}
        _cluster_fail(
            ranks,
            once=later(
                "The cluster's pre-flight check did not pass within %(n)s minutes. It was never "
                "billed; its nodes are free again. Start it again or contact support."
            )
            % words,
            again=later(
                "The cluster's pre-flight check did not pass within %(n)s minutes. Billing "
                "stopped when the checks began; its nodes are free again. Start it again or "
                "contact support."
            )
            % words,
        )
    logger.warning("cluster.checking_expired cluster=%s since=%s", cluster_id, since.isoformat())
    return True


def _cluster_fail(ranks: list[Instance], *, once: Deferred, again: Deferred) -> None:
    """Every rank fails and gives its GPUs back, with `once` as the reason, or `again` for a
    cluster that ran before (a node was lost and it was being checked again)."""
    message = again if any(rank.started_at for rank in ranks) else once
    for rank in ranks:
        instance_fail(rank.id, message)


def bad_ranks(result: dict[str, Any], floor: float | None) -> list[int]:
    """The ranks whose node drags the result below the floor: those whose fastest pair is below
    it (a bad node is slow in every pair it is in; a good one fast in one at least). When every
    node looks bad (two nodes: one pair) the slowest alone, the highest rank on a tie (rank 0
    is the launcher), so one node is replaced a round."""
    if floor is None:
        return []
    nodes = [(float(n["best_gbps"]), int(n["rank"])) for n in result.get("per_node") or []]
    slow = [(gbps, rank) for gbps, rank in nodes if gbps < floor]
    if slow and len(slow) == len(nodes):
        return [min(slow, key=lambda found: (found[0], -found[1]))[1]]
    return sorted(rank for _gbps, rank in slow)


def _failed_rounds(found: Preflight, since: datetime | None) -> int:
    """Failed rounds of this time in checking (since `since`, the cluster's checking_since;
    for a round begun before that was kept, since the cluster last passed)."""
    rounds = Preflight.objects.filter(cluster_id=found.cluster_id)
    if since is None:
        passed = rounds.filter(status=P.PASSED).order_by("-round")
        rounds = rounds.filter(round__gt=passed.values_list("round", flat=True).first() or 0)
    else:
        rounds = rounds.filter(started_at__gte=since)
    return rounds.filter(status=P.FAILED).count()


def _blamed_nodes(found: Preflight, since: datetime | None) -> frozenset[str]:
    """The nodes this time in checking's rounds blamed (a moved rank goes to none of them)."""
    rounds = Preflight.objects.filter(cluster_id=found.cluster_id, status=P.FAILED)
    if since is not None:
        rounds = rounds.filter(started_at__gte=since)
    return frozenset(
        str(row.nodes[str(bad["rank"])])
        for row in rounds.only("nodes", "bad_nodes")
        for bad in row.bad_nodes
        if str(bad["rank"]) in row.nodes
    )


def round_record(round_id: int, result: dict[str, Any] | None, *, error: str = "") -> str:
    """Judge a round's result (None: it gave none, `error` says why, as the timeline says it)
    under the ranks' locks, and do what it means. Returns the round's status."""
    with transaction.atomic():
        cluster_id = Preflight.objects.values_list("cluster_id", flat=True).get(pk=round_id)
        ranks = ranks_locked(cluster_id)
        found = Preflight.objects.select_for_update().get(pk=round_id)
        if found.status != P.RUNNING:
            return found.status
        found.finished_at = timezone.now()
        same = {str(number(rank)): rank.node_id for rank in ranks} == found.nodes
        if not same or any(rank.status != S.CHECKING for rank in ranks):
            found.status = P.ABANDONED
            found.save(update_fields=["status", "finished_at"])
            return found.status
        floor = found.floor_gbps
        if result is not None:
            found.busbw_gbps = float(result["busbw_gbps"])
            found.pairs = list(result.get("pairs") or [])
        bad = bad_ranks(result, floor) if result is not None else []
        low = floor is not None and found.busbw_gbps is not None and found.busbw_gbps < floor
        if result is not None and not bad and not low:
            found.status = P.PASSED
            found.save()
            _passed(found, ranks)
            return found.status
        found.status = P.FAILED
        found.message = error
        by_rank = {number(rank): rank for rank in ranks}
        nodes = {node.pk: node for node in Node.objects.filter(pk__in=found.nodes.values())}
        found.bad_nodes = [
            {"rank": number, "node": nodes[str(by_rank[number].node_id)].name} for number in bad
        ]
        found.save()
        _failed(found, ranks, [by_rank[number] for number in bad], nodes, error)
    return found.status


def _words(found: Preflight) -> dict[str, Any]:
    return {
        "round": found.round,
        "busbw": f"{found.busbw_gbps:.1f}" if found.busbw_gbps is not None else "-",
        "floor": f"{found.floor_gbps:g}" if found.floor_gbps is not None else "-",
    }


def _passed(found: Preflight, ranks: list[Instance]) -> None:
    message = later(
        "Pre-flight check passed (round %(round)s): %(busbw)s GB/s bus bandwidth, floor "
        "%(floor)s GB/s. Running: billing started."
    ) % _words(found)
    ranks_mark_running(ranks, message)
    Cluster.objects.filter(pk=found.cluster_id).update(checking_since=None)
    # ranks that run a program to its end start it now (clusters.gates)
    enqueue_on_commit("clusters.tasks.open_gates", str(found.cluster_id))
    cluster = Cluster.objects.get(pk=found.cluster_id)
    emit_about(cluster, recovered_or(cluster.tenant_id, cluster.id, EventType.CLUSTER_READY))
    logger.info("cluster.preflight_passed cluster=%s busbw=%s", found.cluster_id, found.busbw_gbps)


def _failed(
    found: Preflight, ranks: list[Instance], bad: list[Instance], nodes: dict[str, Node], error: str
) -> None:
    """A failed round: the blamed ranks moved (their nodes cordoned or put up for review:
    _blame), or, none blamed, the check again on the same nodes; after the last round
    allowed, the whole cluster failed (it was never billed)."""
    words = _words(found)
    text = error or (
        later(
            "Pre-flight check failed (round %(round)s): %(busbw)s GB/s bus bandwidth, floor "
            "%(floor)s GB/s."
        )
        % words
    )
    InstanceEvent.objects.create(instance=ranks[0], status=S.CHECKING, message=text)
    logger.warning(
        "cluster.preflight_failed cluster=%s round=%d busbw=%s bad=%s",
        found.cluster_id,
        found.round,
        found.busbw_gbps,
        found.bad_nodes,
    )
    since = Cluster.objects.values_list("checking_since", flat=True).get(pk=found.cluster_id)
    if _failed_rounds(found, since) >= settings.CLUSTER_PREFLIGHT_MAX_ROUNDS:
        words = {**words, "n": settings.CLUSTER_PREFLIGHT_MAX_ROUNDS}
        _cluster_fail(
            ranks,
            once=later(
                "The cluster failed its pre-flight check %(n)s times in a row (last: %(busbw)s "
                "GB/s bus bandwidth, floor %(floor)s GB/s). It was never billed; its nodes are "
                "free again. Start it again or contact support."
            )
            % words,
            again=later(
                "The cluster failed its pre-flight check %(n)s times in a row (last: %(busbw)s "
                "GB/s bus bandwidth, floor %(floor)s GB/s). Billing stopped when the checks "
                "began; its nodes are free again. Start it again or contact support."
            )
            % words,
        )
        return
    avoid = _blamed_nodes(found, since)
    for rank in bad:
        node = nodes[str(rank.node_id)]
        _rank_move(rank, node, cordoned=_blame(found, rank, node), avoid=avoid)
    if not bad:
        # no node stood out (or there was no result to tell): the same nodes, once more
        enqueue_on_commit(
            "clusters.tasks.preflight_cluster", str(found.cluster_id), countdown=AGAIN_AFTER_S
        )


def _blame(found: Preflight, rank: Instance, node: Node) -> bool:
    """What the round's word does to the node it blames. The check ran in the tenant's
    container, so its word alone takes no node out of service: the node is cordoned only when
    its node agent's own reports of the last AGENT_WINDOW agree (a hardware fault), else it is
    put up for an operator's review and stays in service. A node out of service already is left
    as it is. Returns whether it was cordoned now."""
    words = _words(found)
    reason = (
        f"pre-flight of cluster {found.cluster_id} round {found.round}: rank {number(rank)} below "
        f"the floor of {words['floor']} GB/s in every node pair (all-reduce {words['busbw']} "
        "GB/s), as measured in the tenant's container"
    )
    if node.state != NodeState.READY:
        return False
    fault = node_agent_fault(node, since=timezone.now() - AGENT_WINDOW)
    if fault:
        agreed = f"{reason}; its node agent agrees: {fault}"
        return node_cordon(node=node, reason=agreed, actor=None)
    node_review_request(node=node, reason=f"{reason}; its node agent reported nothing wrong")
    return False


def _rank_move(rank: Instance, node: Node, *, cordoned: bool, avoid: frozenset[str]) -> None:
    words = {"node": node.name, "rank": number(rank)}
    if cordoned:
        message = later(
            "Its node %(node)s was slow in the pre-flight check and was cordoned; moving rank "
            "%(rank)s to another node."
        )
    else:
        message = later(
            "Its node %(node)s was slow in the pre-flight check; moving rank %(rank)s to "
            "another node."
        )
    rank_replace(rank, message % words, avoid=avoid)
