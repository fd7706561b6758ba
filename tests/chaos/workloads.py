"""The longer-lived kinds a chaos round keeps in flight besides instances, over the real HTTP
API: a cluster of whole nodes, a multi-node job running the simulated trainer with a checkpoint
directory on each rank's disk, and an inference endpoint. What each must have become once the
platform settled is checked by tests/chaos/invariants.py."""

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import requests

from tests.chaos.traffic import Users

IMAGE = "pytorch-2.1"
WHOLE_NODE = "8× A100 80GB SXM bare metal"  # its own pool: the instances' orders take H100s
REPLICA_OFFERING = "1× H100 80GB SXM"
MODEL = "qwen2-7b-instruct"  # a model of the public pool (tests.factories.make_public_model)
CHECKPOINT_DIR = "/root/data/ckpt"  # on each rank's own disk (a claim the emulator keeps)


@dataclass
class Workloads:
    """What was answered 202 for each kind: ids of the clusters, jobs and endpoints made."""

    clusters: list[str] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)
    endpoints: list[str] = field(default_factory=list)
    deleted_clusters: list[str] = field(default_factory=list)
    deleted_endpoints: list[str] = field(default_factory=list)
    # endpoint id → when its delete was answered (epoch s): its replicas bill no later
    endpoint_deleted_at: dict[str, float] = field(default_factory=dict)
    job_steps: int = 0


class Submitter:
    """Orders the kinds for one user (a token of its own, funded for whole nodes)."""

    def __init__(self, users: Users, user: int, offerings: dict[str, str], steps: int) -> None:
        self.users, self.user, self.offerings = users, user, offerings
        self.made = Workloads(job_steps=steps)

    def _create(self, path: str, body: dict[str, object]) -> str | None:
        token = self.users.tokens[self.user]
        headers = {"Idempotency-Key": uuid.uuid4().hex}
        answer = self.users.call(token, "POST", path, json=body, headers=headers)
        if answer is None or answer.status_code != 202:
            return None
        return str(answer.json()["id"])

    def _delete(self, path: str) -> bool:
        answer = self.users.call(self.users.tokens[self.user], "DELETE", path)
        return answer is not None and answer.status_code in (202, 204)

    def cluster(self) -> None:
        body = {"offering": self.offerings[WHOLE_NODE], "node_count": 2, "image": IMAGE}
        made = self._create("/api/v1/clusters", {**body, "template": "torchrun"})
        if made:
            self.made.clusters.append(made)

    def job(self) -> None:
        command = f"starverse-sim-train --steps {self.made.job_steps} --step-seconds 1"
        body = {
            "offering": self.offerings[WHOLE_NODE],
            "image": IMAGE,
            "node_count": 2,
            "command": f"{command} --checkpoint-dir {CHECKPOINT_DIR}",
            "checkpoint_dir": CHECKPOINT_DIR,
            "nas": False,
        }
        made = self._create("/api/v1/jobs", body)
        if made:
            self.made.jobs.append(made)

    def endpoint(self) -> None:
        body = {
            "name": f"chaos-{len(self.made.endpoints)}",
            "source": {"dataset": MODEL},
            "engine": "vllm",
            "offering": self.offerings[REPLICA_OFFERING],
            "min_replicas": 1,
            "max_replicas": 1,
        }
        made = self._create("/api/v1/endpoints", body)
        if made:
            self.made.endpoints.append(made)

    def end(self) -> None:
        """The clusters and endpoints deleted (the jobs end by themselves)."""
        for cluster in self.made.clusters:
            if cluster not in self.made.deleted_clusters and self._delete(
                f"/api/v1/clusters/{cluster}"
            ):
                self.made.deleted_clusters.append(cluster)
        for endpoint in self.made.endpoints:
            if endpoint not in self.made.deleted_endpoints and self._delete(
                f"/api/v1/endpoints/{endpoint}"
            ):
                self.made.deleted_endpoints.append(endpoint)
                self.made.endpoint_deleted_at[endpoint] = time.time()

    # what each became ------------------------------------------------------------------------

    def _get(self, path: str) -> dict[str, Any]:
        answer = self.users.call(self.users.tokens[self.user], "GET", path)
        if answer is None or answer.status_code != 200:
            return {
                "status": f"unreadable ({'no answer' if answer is None else answer.status_code})"
            }
        return dict(answer.json())

    def statuses(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(kind, id, as the API shows it) for each cluster, job and endpoint made."""
        return [
            (kind, pk, self._get(f"/api/v1/{kind}s/{pk}"))
            for kind, made in (
                ("cluster", self.made.clusters),
                ("job", self.made.jobs),
                ("endpoint", self.made.endpoints),
            )
            for pk in made
        ]

    def transitional(self) -> list[str]:
        """Each one still on its way: a cluster not yet running (or terminated, once deleted),
        a job not yet ended, an endpoint not yet running (or deleted), or running with no
        replica Ready yet: an endpoint stays running while its replica's pod is alive but not
        Ready (endpoints.scheduler), the API showing `replicas.ready` 0. Settling on the status
        alone, one CI run checked an endpoint 29 s after the emulator's restart (the API
        outage), found it running, and its Service not answering."""
        waiting = []
        for kind, pk, shown in self.statuses():
            if shown["status"] in TRANSITIONAL[kind]:
                waiting.append(f"{kind} {pk} {shown['status']}")
            elif (
                kind == "endpoint"
                and shown["status"] == "running"
                and not shown["replicas"]["ready"]
            ):
                waiting.append(f"{kind} {pk} running (no replica ready)")
        return waiting

    def broken(self, kube_url: str) -> list[str]:
        """What is not as promised: a cluster running with every rank up (terminated once
        deleted), a job succeeded, an endpoint running with a Ready replica that answers its
        engine's /v1/models through the cluster's Service network (deleted once deleted)."""
        found = []
        for kind, pk, shown in self.statuses():
            gone = pk in self.made.deleted_clusters + self.made.deleted_endpoints
            wanted = ENDED[kind] if gone else SETTLED[kind]
            if shown["status"] != wanted:
                found.append(f"{kind} {pk} is {shown['status']}, not {wanted}")
            elif kind == "cluster" and not gone:
                ranks = [rank["status"] for rank in shown["ranks"]]
                if ranks != ["running"] * 2:
                    found.append(f"cluster {pk} running with ranks {ranks}")
            elif kind == "endpoint" and not gone and (failure := _unserved(kube_url, pk)):
                found.append(f"endpoint {pk} running but its Service does not answer: {failure}")
        return found


TRANSITIONAL = {
    "cluster": ("queued", "provisioning", "checking", "stopping", "terminating"),
    "job": ("queued", "provisioning", "running", "recovering", "cancelling"),
    "endpoint": ("provisioning", "updating", "deleting"),
}
SETTLED = {"cluster": "running", "job": "succeeded", "endpoint": "running"}
ENDED = {"cluster": "terminated", "job": "succeeded", "endpoint": "deleted"}


# How long an endpoint the API shows serving may take to answer through its Service: the API's
# `replicas.ready` is the platform's last look at the pods (endpoints.scheduler, every
# second), so a replica that stopped being Ready since (a container restarted: the emulator's
# restart re-admits every pod, as a node's reboot would) is still counted for up to that long.
SERVICE_ANSWER_S = 15.0


def _unserved(kube_url: str, endpoint_id: str) -> str:
    """Why the endpoint's Service does not answer its engine's /v1/models ("" when it does),
    asked again each second for SERVICE_ANSWER_S: the last answer's status and text, with
    the namespace's pods' phase, Ready condition and restarts (what the emulator shows)."""
    from endpoints.engines import ENGINE_PORT
    from endpoints.manifests import object_name
    from endpoints.models import Endpoint

    namespace = Endpoint.objects.get(pk=endpoint_id).k8s_namespace
    host = f"{object_name(endpoint_id)}.{namespace}.svc.cluster.local:{ENGINE_PORT}"
    until = time.monotonic() + SERVICE_ANSWER_S
    while True:
        try:
            answer = requests.get(f"{kube_url}/v1/models", headers={"Host": host}, timeout=10)
            failure = (
                "" if answer.status_code == 200 else f"{answer.status_code} {answer.text[:200]!r}"
            )
        except requests.RequestException as error:
            failure = f"no answer ({error})"
        if not failure or time.monotonic() >= until:
            break
        time.sleep(1.0)
    return f"{failure}; pods: {_pods_shown(kube_url, namespace)}" if failure else ""


def _pods_shown(kube_url: str, namespace: str) -> str:
    """Each pod of the namespace: name, phase, Ready, deleting, restarts (the emulator's view)."""
    try:
        listed = requests.get(f"{kube_url}/api/v1/namespaces/{namespace}/pods", timeout=10).json()
    except (requests.RequestException, ValueError) as error:
        return f"unreadable ({error})"
    shown = []
    for pod in listed.get("items") or []:
        status = pod.get("status") or {}
        ready = next(
            (c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"),
            "?",
        )
        restarts = sum(c.get("restartCount", 0) for c in status.get("containerStatuses") or [])
        deleting = " deleting" if pod["metadata"].get("deletionTimestamp") else ""
        shown.append(
            f"{pod['metadata']['name']} {status.get('phase')} Ready={ready} "
            f"restarts={restarts}{deleting}"
        )
    return ", ".join(shown) or "none"
