"""A cluster's pre-flight check, before billing starts (README "Clusters: the pre-flight
check"). Once every rank is up (checking, unbilled), the worker runs `starverse-preflight
--json` in rank 0's container (the images' init package: an NCCL all-reduce across every rank,
then between pairs of nodes) and judges the result against the offering's floor:

- passed: every rank runs, and is billed, from the same moment (instances.states
  ranks_mark_running);
- failed: the node that drags it down is cordoned with the result as its reason, its rank moves
  to another free whole node (instances.lifecycle.rank_replace) and the check runs again once
  it is up; after CLUSTER_PREFLIGHT_MAX_ROUNDS failed rounds the cluster fails, never billed.

Each round is a Preflight row and a line on the cluster's timeline (rank 0's events). The exec
runs outside any transaction; a round whose cluster changed meanwhile (a rank stopped, moved or
was lost) is abandoned, and the next one starts when every rank is checking again."""

import json
import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from clusters.models import Preflight, PreflightStatus
from fleet.models import Node
from fleet.services import node_cordon
from instances.choices import InstanceStatus
from instances.lifecycle import rank_replace
from instances.models import Instance, InstanceEvent
from instances.states import (
    instance_fail,
    rank_mark_checking,
    ranks_locked,
    ranks_mark_running,
)
from starverse.core import kube
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.text import later

logger = logging.getLogger(__name__)
S = InstanceStatus
P = PreflightStatus
COMMAND = ["starverse-preflight", "--json"]
CONTAINER = "main"


def preflight_run(cluster_id: str) -> str | None:
    """Run a round if every rank of the cluster is checking and none runs: returns its status
    (passed, failed or abandoned), or None when no round was due. A retryable cluster error
    abandons the round and propagates, so the retrying task starts a new one."""
    round_id = _round_start(cluster_id)
    if round_id is None:
        return None
    head = Instance.objects.get(cluster_id=cluster_id, rank=0)
    result, error = None, ""
    try:
        code, output = kube.exec_run(
            head.k8s_namespace,
            head.k8s_name,
            container=CONTAINER,
            command=COMMAND,
            timeout=settings.CLUSTER_PREFLIGHT_TIMEOUT_S,
        )
        result = result_parse(output) if code == 0 else None
        if result is None:
            error = f"exit code {code}: {output.strip()[-300:]}"
    except kube.RetryableKubeError:
        Preflight.objects.filter(pk=round_id, status=P.RUNNING).update(
            status=P.ABANDONED, finished_at=timezone.now()
        )
        raise
    except kube.PermanentKubeError as failure:
        error = str(failure)
    return round_record(round_id, result, error=error)


def result_parse(output: str) -> dict[str, Any] | None:
    """The JSON object `starverse-preflight --json` printed (its last line), or None."""
    for line in reversed(output.strip().splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict) and isinstance(found.get("busbw_gbps"), int | float):
            return found
    return None


def _round_start(cluster_id: str) -> int | None:
    """A new round's row, when every rank is checking (or, ranks that came up again beside
    running ones, once those are paused) and no round runs (a round left running longer than
    twice the timeout, by a worker that died, is abandoned first)."""
    with transaction.atomic():
        ranks = ranks_locked(cluster_id)
        waiting = [rank for rank in ranks if rank.status == S.CHECKING]
        if not waiting or any(rank.status not in (S.CHECKING, S.RUNNING) for rank in ranks):
            return None
        _pause_for(ranks, waiting)
        stale = timezone.now() - timedelta(seconds=2 * settings.CLUSTER_PREFLIGHT_TIMEOUT_S)
        rounds = Preflight.objects.filter(cluster_id=cluster_id)
        rounds.filter(status=P.RUNNING, started_at__lt=stale).update(
            status=P.ABANDONED, finished_at=timezone.now()
        )
        if rounds.filter(status=P.RUNNING).exists():
            return None
        last = rounds.order_by("-round").values_list("round", flat=True).first() or 0
        found = Preflight.objects.create(
            cluster_id=cluster_id,
            round=last + 1,
            floor_gbps=ranks[0].offering.preflight_floor_gbps,
            nodes={str(rank.rank): rank.node_id for rank in ranks},
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
    return found.pk


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
                % {"ranks": ", ".join(str(found.rank) for found in waiting)},
                now=now,
            )


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


def _failed_rounds(cluster_id: str) -> int:
    """Failed rounds since the cluster last passed (a node lost later starts a new count)."""
    rounds = Preflight.objects.filter(cluster_id=cluster_id)
    passed = rounds.filter(status=P.PASSED).order_by("-round").values_list("round", flat=True)
    since = passed.first() or 0
    return rounds.filter(status=P.FAILED, round__gt=since).count()


def round_record(round_id: int, result: dict[str, Any] | None, *, error: str = "") -> str:
    """Judge a round's result (None: the check could not run, `error` says why) under the
    ranks' locks, and do what it means. Returns the round's status."""
    with transaction.atomic():
        cluster_id = Preflight.objects.values_list("cluster_id", flat=True).get(pk=round_id)
        ranks = ranks_locked(cluster_id)
        found = Preflight.objects.select_for_update().get(pk=round_id)
        if found.status != P.RUNNING:
            return found.status
        found.finished_at = timezone.now()
        same = {str(rank.rank): rank.node_id for rank in ranks} == found.nodes
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
        by_rank = {rank.rank: rank for rank in ranks}
        nodes = {node.pk: node for node in Node.objects.filter(pk__in=found.nodes.values())}
        found.bad_nodes = [
            {"rank": number, "node": nodes[str(by_rank[number].node_id)].name} for number in bad
        ]
        found.save()
        _failed(found, ranks, [by_rank[number] for number in bad], nodes)
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
    logger.info("cluster.preflight_passed cluster=%s busbw=%s", found.cluster_id, found.busbw_gbps)


def _failed(
    found: Preflight, ranks: list[Instance], bad: list[Instance], nodes: dict[str, Node]
) -> None:
    """A failed round: the bad nodes cordoned and their ranks moved, or, after the last round
    allowed, the whole cluster failed (it was never billed)."""
    words = _words(found)
    if found.message:
        text = later("Pre-flight check round %(round)s could not run: %(error)s.") % {
            **words,
            "error": found.message,
        }
    else:
        text = (
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
    if _failed_rounds(str(found.cluster_id)) >= settings.CLUSTER_PREFLIGHT_MAX_ROUNDS:
        if any(rank.started_at for rank in ranks):  # a re-check (a node was lost): it ran before
            message = later(
                "The cluster failed its pre-flight check %(n)s times in a row (last: %(busbw)s "
                "GB/s bus bandwidth, floor %(floor)s GB/s). Billing stopped when the checks "
                "began; its nodes are free again. Start it again or contact support."
            ) % {**words, "n": settings.CLUSTER_PREFLIGHT_MAX_ROUNDS}
        else:
            message = later(
                "The cluster failed its pre-flight check %(n)s times in a row (last: %(busbw)s "
                "GB/s bus bandwidth, floor %(floor)s GB/s). It was never billed; its nodes are "
                "free again. Start it again or contact support."
            ) % {**words, "n": settings.CLUSTER_PREFLIGHT_MAX_ROUNDS}
        for rank in ranks:
            instance_fail(rank.id, message)
        return
    for rank in bad:
        node = nodes[str(rank.node_id)]
        node_cordon(
            node=node,
            reason=(
                f"pre-flight of cluster {found.cluster_id} round {found.round}: rank "
                f"{rank.rank} below the floor of {words['floor']} GB/s in every node pair "
                f"(all-reduce {words['busbw']} GB/s)"
            ),
            actor=None,
        )
        rank_replace(
            rank,
            later(
                "Its node %(node)s was slow in the pre-flight check and was cordoned; "
                "moving rank %(rank)s to another node."
            )
            % {"node": node.name, "rank": rank.rank},
        )
    if not bad:
        # nothing to replace (the check could not run, or no node stood out): try again
        enqueue_on_commit("clusters.tasks.preflight_cluster", str(found.cluster_id), countdown=30)
