"""The kube emulator's Deployments and ReplicaSets through the official kubernetes client
(AppsV1Api): pods kept from the template, the scale and status subresources, rolling updates
within maxSurge / maxUnavailable, scale to zero and garbage collection."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from devstack.kube import KubeEmulator
from tests.devstack import GPU_TOLERATION, wait_for

NS = "default"


@pytest.fixture
def apps(emu: KubeEmulator, kubeconfig: str) -> Iterator[client.AppsV1Api]:
    api_client = config.new_client_from_config(config_file=kubeconfig)
    yield client.AppsV1Api(api_client)
    api_client.close()


def deployment_body(
    name: str, replicas: int = 3, image: str = "vllm/vllm-openai:v0.6.0", **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "tolerations": [GPU_TOLERATION],
                    "containers": [{"name": "engine", "image": image}],
                },
            },
            **spec,
        },
    }


def owned_pods(api: client.CoreV1Api, name: str) -> list[client.V1Pod]:
    pods = api.list_namespaced_pod(NS, label_selector=f"app={name}").items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def settled(apps: client.AppsV1Api, name: str, replicas: int) -> client.V1Deployment | None:
    deployment = apps.read_namespaced_deployment(name, NS)
    status = deployment.status
    done = (
        (status.replicas or 0) == replicas
        and (status.ready_replicas or 0) == replicas
        and (status.updated_replicas or 0) == replicas
        and status.observed_generation == deployment.metadata.generation
    )
    return deployment if done else None


def test_deployment_keeps_its_replicas_through_a_replicaset_with_a_correct_status(
    apps: client.AppsV1Api, api: client.CoreV1Api
) -> None:
    created = apps.create_namespaced_deployment(NS, deployment_body("web", 3))
    assert created.spec.strategy.rolling_update.max_surge == "25%"
    assert created.spec.strategy.rolling_update.max_unavailable == "25%"
    deployment = wait_for(lambda: settled(apps, "web", 3), "3 ready replicas")

    assert deployment.status.available_replicas == 3
    assert deployment.status.observed_generation == 1
    conditions = {c.type: c for c in deployment.status.conditions}
    assert conditions["Available"].status == "True"
    assert conditions["Available"].reason == "MinimumReplicasAvailable"
    assert conditions["Progressing"].reason == "NewReplicaSetAvailable"
    [rs] = apps.list_namespaced_replica_set(NS).items
    template_hash = rs.metadata.labels["pod-template-hash"]
    assert rs.metadata.name == f"web-{template_hash}"
    assert rs.metadata.owner_references[0].kind == "Deployment"
    assert rs.metadata.owner_references[0].uid == deployment.metadata.uid
    assert rs.metadata.annotations["deployment.kubernetes.io/revision"] == "1"
    assert rs.spec.selector.match_labels == {"app": "web", "pod-template-hash": template_hash}
    assert rs.status.ready_replicas == 3
    pods = owned_pods(api, "web")
    assert len(pods) == 3
    for pod in pods:
        assert pod.metadata.name.startswith(f"{rs.metadata.name}-")
        assert pod.metadata.labels["pod-template-hash"] == template_hash
        assert pod.metadata.owner_references[0].uid == rs.metadata.uid
        assert pod.status.phase == "Running"


def test_deleted_and_failed_pods_are_replaced(
    emu: KubeEmulator, apps: client.AppsV1Api, api: client.CoreV1Api
) -> None:
    apps.create_namespaced_deployment(NS, deployment_body("web", 2))
    wait_for(lambda: settled(apps, "web", 2), "2 ready replicas")
    first, second = owned_pods(api, "web")

    api.delete_namespaced_pod(first.metadata.name, NS)
    api.patch_namespaced_pod_status(
        second.metadata.name, NS, {"status": {"phase": "Failed", "reason": "Evicted"}}
    )

    def replaced() -> bool:
        names = {p.metadata.name for p in owned_pods(api, "web") if p.status.phase == "Running"}
        return len(names) == 2 and not names & {first.metadata.name, second.metadata.name}

    wait_for(replaced, "two new pods")
    wait_for(lambda: settled(apps, "web", 2), "2 ready replicas again")


def test_scale_subresource_reads_and_writes_replicas_and_scaling_to_zero_removes_the_pods(
    apps: client.AppsV1Api, api: client.CoreV1Api
) -> None:
    apps.create_namespaced_deployment(NS, deployment_body("web", 1))
    wait_for(lambda: settled(apps, "web", 1), "1 ready replica")

    scale = apps.read_namespaced_deployment_scale("web", NS)
    assert (scale.spec.replicas, scale.status.replicas, scale.status.selector) == (1, 1, "app=web")
    patched = apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 3}})
    assert patched.spec.replicas == 3
    assert apps.read_namespaced_deployment("web", NS).metadata.generation == 2
    wait_for(lambda: settled(apps, "web", 3), "3 ready replicas")

    body = apps.read_namespaced_deployment_scale("web", NS)
    body.spec.replicas = 0
    assert apps.replace_namespaced_deployment_scale("web", NS, body).spec.replicas == 0
    wait_for(lambda: not api.list_namespaced_pod(NS, label_selector="app=web").items, "no pods")
    deployment = wait_for(lambda: settled(apps, "web", 0), "0 replicas")
    assert deployment.status.replicas is None  # zero counts are omitted, as omitempty does
    assert deployment.status.observed_generation == 3

    with pytest.raises(ApiException) as denied:
        apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": -1}})
    assert denied.value.status == 422
    assert apps.read_namespaced_deployment("web", NS).spec.replicas == 0


def test_rolling_update_with_max_unavailable_zero_replaces_pods_one_by_one(
    emu: KubeEmulator, apps: client.AppsV1Api, api: client.CoreV1Api
) -> None:
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    apps.create_namespaced_deployment(NS, deployment_body("web", 3, strategy=strategy))
    wait_for(lambda: settled(apps, "web", 3), "3 ready replicas")
    [old_rs] = apps.list_namespaced_replica_set(NS).items

    with emu.paused():
        apps.patch_namespaced_deployment(
            "web",
            NS,
            {"spec": {"template": {"spec": {"containers": [{"name": "engine", "image": "v2"}]}}}},
        )
        seen_ready, seen_total = [], []
        for _ in range(200):
            emu.step(0.05)
            pods = owned_pods(api, "web")
            seen_total.append(len(pods))
            seen_ready.append(
                sum(
                    1
                    for p in pods
                    if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions)
                )
            )
            if settled(apps, "web", 3) and len(pods) == 3:
                break
    assert min(seen_ready) >= 3  # never below the wanted count: maxUnavailable 0
    assert max(seen_total) == 4  # one surge pod at a time
    deployment = wait_for(lambda: settled(apps, "web", 3), "rolled out")
    assert deployment.metadata.annotations["deployment.kubernetes.io/revision"] == "2"
    replicasets = {rs.metadata.name: rs for rs in apps.list_namespaced_replica_set(NS).items}
    assert replicasets[old_rs.metadata.name].spec.replicas == 0
    [new_rs] = [rs for name, rs in replicasets.items() if name != old_rs.metadata.name]
    assert new_rs.spec.replicas == 3
    assert {p.spec.containers[0].image for p in owned_pods(api, "web")} == {"v2"}
    events = api.list_namespaced_event(
        NS, field_selector="involvedObject.name=web,reason=ScalingReplicaSet"
    ).items
    messages = {e.message for e in events}
    assert f"Scaled down replica set {old_rs.metadata.name} from 1 to 0" in messages


def test_default_strategy_rolls_a_template_change_and_recreate_stops_old_pods_first(
    emu: KubeEmulator, apps: client.AppsV1Api, api: client.CoreV1Api
) -> None:
    apps.create_namespaced_deployment(NS, deployment_body("web", 4))
    apps.create_namespaced_deployment(
        NS, deployment_body("batch", 2, strategy={"type": "Recreate"})
    )
    wait_for(lambda: settled(apps, "web", 4) and settled(apps, "batch", 2), "both ready")

    for name in ("web", "batch"):
        apps.patch_namespaced_deployment(
            name, NS, {"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}}
        )
    wait_for(lambda: settled(apps, "web", 4) and settled(apps, "batch", 2), "both rolled")
    for name, count in (("web", 4), ("batch", 2)):
        pods = owned_pods(api, name)
        assert len(pods) == count
        assert {p.metadata.annotations.get("rev") for p in pods} == {"2"}


def test_deleting_a_deployment_collects_its_replicasets_and_pods(
    emu: KubeEmulator, apps: client.AppsV1Api, api: client.CoreV1Api
) -> None:
    apps.create_namespaced_deployment(NS, deployment_body("web", 2))
    apps.create_namespaced_deployment(NS, deployment_body("api", 1))
    wait_for(lambda: settled(apps, "web", 2) and settled(apps, "api", 1), "ready")

    apps.delete_namespaced_deployment("web", NS)
    apps.delete_namespaced_deployment("api", NS, propagation_policy="Foreground")

    wait_for(lambda: not apps.list_namespaced_deployment(NS).items, "deployments gone")
    wait_for(lambda: not apps.list_namespaced_replica_set(NS).items, "replicasets gone")
    wait_for(lambda: not api.list_namespaced_pod(NS).items, "pods gone")


def test_a_selector_that_misses_the_template_labels_is_invalid(apps: client.AppsV1Api) -> None:
    body = deployment_body("web", 1)
    body["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    with pytest.raises(ApiException) as denied:
        apps.create_namespaced_deployment(NS, body)
    assert denied.value.status == 422
    causes = json.loads(denied.value.body)["details"]["causes"]
    assert causes[0]["field"] == "spec.template.metadata.labels"
    assert apps.list_namespaced_deployment(NS).items == []


def test_apps_group_is_discoverable_with_the_scale_subresource(emu: KubeEmulator) -> None:
    cfg = client.Configuration()
    cfg.host = emu.url
    api_client = client.ApiClient(cfg)
    groups = {g.name for g in client.ApisApi(api_client).get_api_versions().groups}
    assert {"apps", "snapshot.storage.k8s.io", "http.keda.sh"} <= groups
    resources = {r.name: r for r in client.AppsV1Api(api_client).get_api_resources().resources}
    assert resources["deployments"].short_names == ["deploy"]
    assert resources["deployments/scale"].kind == "Scale"
    assert resources["deployments/scale"].group == "autoscaling"
    assert "replicasets/status" in resources


def test_deployments_are_watched_like_other_kinds(
    emu: KubeEmulator, apps: client.AppsV1Api
) -> None:
    listing = apps.list_namespaced_deployment(NS)
    apps.create_namespaced_deployment(NS, deployment_body("web", 1))
    stream = apps.list_namespaced_deployment(
        NS,
        watch=True,
        resource_version=listing.metadata.resource_version,
        timeout_seconds=5,
        _preload_content=False,
    )
    seen: list[tuple[str, int]] = []
    for line in stream:
        event = json.loads(line)
        status = event["object"].get("status") or {}
        seen.append((event["type"], status.get("readyReplicas", 0)))
        if status.get("readyReplicas") == 1:
            break
    stream.release_conn()
    assert seen[0] == ("ADDED", 0)
    assert seen[-1] == ("MODIFIED", 1)


def test_pods_of_another_scheduler_wait_for_a_binding_and_the_kubelet_still_admits_them(
    emu: KubeEmulator, apps: client.AppsV1Api, api: client.CoreV1Api
) -> None:
    body = deployment_body("llm", 2)
    template = body["spec"]["template"]["spec"]
    template["schedulerName"] = "starverse-endpoints"
    template["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 8}}
    with emu.paused():
        apps.create_namespaced_deployment(NS, body)
        for _ in range(5):
            emu.step(1.0)
        first, second = owned_pods(api, "llm")
        for pod in (first, second):
            assert pod.spec.node_name is None
            assert pod.status.phase == "Pending"
            assert pod.status.conditions is None  # the default scheduler never looked at it
        assert not api.list_namespaced_event(NS, field_selector="reason=FailedScheduling").items

        response = api.create_namespaced_pod_binding(
            first.metadata.name,
            NS,
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": first.metadata.name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-h100-0"},
            },
            _preload_content=False,
        )
        assert response.status == 201
        assert json.loads(response.data) == {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }
        for _ in range(5):
            emu.step(0.1)
        # a second 8-GPU pod bound to the same full node: the kubelet turns it away
        api.create_namespaced_pod_binding(
            second.metadata.name,
            NS,
            {
                "metadata": {"name": second.metadata.name},
                "target": {"kind": "Node", "name": "gpu-h100-0"},
            },
            _preload_content=False,
        )
        for _ in range(5):
            emu.step(0.1)
        assert api.read_namespaced_pod(first.metadata.name, NS).status.phase == "Running"
        rejected = api.read_namespaced_pod(second.metadata.name, NS)
        assert (rejected.status.phase, rejected.status.reason) == ("Failed", "OutOfnvidia.com/gpu")
        replacement = [
            p
            for p in owned_pods(api, "llm")
            if p.metadata.name not in (first.metadata.name, second.metadata.name)
        ]
        assert [(p.status.phase, p.spec.node_name) for p in replacement] == [("Pending", None)]
        assert apps.read_namespaced_deployment("llm", NS).status.ready_replicas == 1
