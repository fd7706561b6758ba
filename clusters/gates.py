"""The gate of a rank that runs a program to its end (a multi-node job's rank): the program
starts only once the cluster's pre-flight check has passed, on the first start and after every
replacement (docs/architecture.md, "Multi-node jobs: the gate").

Every such rank's pod gets an emptyDir volume at GATE_DIR and `STARVERSE_GATE` naming GATE_FILE
in it; the image's init (`starverse-init -- PROGRAM`) brings SSH up and waits for that file
before it starts the program. Once a round passes, the worker writes the file in every rank's
container through pods/exec (`touch`, the same permission the pre-flight itself uses). The file
lives in the pod: a new pod (a rank placed again, or every rank of a job started again) starts
with its gate closed, so no program can start before its own round passed; opening twice is
harmless, so the task that opens them simply runs again when the cluster's API cuts it short,
and the reconcile pass (gates_lost_hand_out) sends it again when it was lost."""

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from clusters.models import Cluster, Preflight, PreflightStatus
from instances.choices import InstanceStatus
from instances.models import Instance
from starverse.core import kube
from starverse.core.dispatch import enqueue_on_commit

logger = logging.getLogger(__name__)
GATE_DIR = "/run/starverse/gate"
GATE_FILE = f"{GATE_DIR}/open"
GATE_ENV = "STARVERSE_GATE"
GATE_VOLUME = "starverse-gate"
CONTAINER = "main"
OPEN_TIMEOUT_S = 30


def gate_apply(pod: dict[str, Any]) -> dict[str, Any]:
    """The rank's pod with its gate: the volume, its mount and the variable the init reads."""
    spec = pod["spec"]
    container = spec["containers"][0]
    spec["volumes"] = [*spec["volumes"], {"name": GATE_VOLUME, "emptyDir": {"sizeLimit": "1Mi"}}]
    container["volumeMounts"] = [
        *container["volumeMounts"],
        {"name": GATE_VOLUME, "mountPath": GATE_DIR},
    ]
    container["env"] = [*container["env"], {"name": GATE_ENV, "value": GATE_FILE}]
    return pod


def gates_open(cluster_id: str) -> int:
    """Open the gate of every running rank of the cluster that runs a program (its pre-flight
    passed): returns how many were opened. A rank whose pod is gone or refuses the exec is left
    (it is being replaced: its new pod waits for its own round); an unreachable API server
    raises kube.RetryableKubeError for the task to retry. Once every such rank's gate is open,
    the rounds that passed so far are marked so (Preflight.gates_opened_at)."""
    if not Cluster.objects.filter(pk=cluster_id).exists():
        return 0  # deleted meanwhile: its ranks went with it
    ranks = list(_program_ranks().filter(cluster_rank__cluster_id=cluster_id))
    passed = Preflight.objects.filter(cluster_id=cluster_id, status=PreflightStatus.PASSED)
    last = passed.order_by("-round").values_list("round", flat=True).first()
    opened = 0
    for rank in ranks:
        try:
            code, output = kube.exec_run(
                rank.k8s_namespace,
                rank.k8s_name,
                container=CONTAINER,
                command=["touch", GATE_FILE],
                timeout=min(OPEN_TIMEOUT_S, settings.CLUSTER_PREFLIGHT_TIMEOUT_S),
            )
        except (kube.PermanentKubeError, kube.ExecTimeout) as error:
            logger.warning("cluster.gate_failed cluster=%s rank=%s: %s", cluster_id, rank.pk, error)
            continue
        if code == 0:
            opened += 1
        else:
            logger.warning(
                "cluster.gate_failed cluster=%s rank=%s code=%s %s",
                cluster_id,
                rank.pk,
                code,
                output.strip()[-200:],
            )
    logger.info("cluster.gates_opened cluster=%s ranks=%d", cluster_id, opened)
    if last is not None and opened == len(ranks):
        passed.filter(round__lte=last, gates_opened_at__isnull=True).update(
            gates_opened_at=timezone.now()
        )
    return opened


def gates_lost_hand_out(*, now: datetime | None = None) -> list[str]:
    """Send the task that opens the gates again for every cluster whose last round passed more
    than RECONCILE_STUCK_AFTER_S ago while ranks of it that run a program are running with
    their gates not yet opened: that task (sent once, when the round passed) was lost with a
    killed worker or a flushed broker, and the programs would wait, billed, for good. Opening
    twice is harmless. Returns the clusters' ids."""
    passed_before = (now or timezone.now()) - timedelta(seconds=settings.RECONCILE_STUCK_AFTER_S)
    later_round = Preflight.objects.filter(
        cluster_id=OuterRef("cluster_id"), round__gt=OuterRef("round")
    )
    waiting = _program_ranks().filter(cluster_rank__cluster_id=OuterRef("cluster_id"))
    clusters = list(
        Preflight.objects.filter(
            status=PreflightStatus.PASSED,
            gates_opened_at__isnull=True,
            finished_at__lt=passed_before,
        )
        .filter(Exists(waiting))
        .exclude(Exists(later_round))
        .order_by("finished_at")
        .values_list("cluster_id", flat=True)
    )
    for cluster_id in clusters:
        enqueue_on_commit("clusters.tasks.open_gates", cluster_id)
    if clusters:
        logger.warning("cluster.gates_handed_out clusters=%s", clusters)
    return clusters


def _program_ranks() -> QuerySet[Instance]:
    """The running ranks (of any cluster) that run a program to its end: those with a gate."""
    return Instance.objects.filter(
        cluster_rank__index__isnull=False,
        status=InstanceStatus.RUNNING,
        workload__isnull=False,
    ).exclude(k8s_name="")
