"""More kube emulator API behaviour: subresources, cascading deletes, pagination, field
validation modes, concurrency, shutdown, the CLI and more kubectl commands."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from devstack.kube import KubeEmulator
from tests.devstack import (
    KUBECTL,
    config_map,
    core_api,
    error_body,
    pod_body,
    start_emulator,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[2]


def test_status_subresource_is_separate_from_the_main_resource(api: client.CoreV1Api) -> None:
    api.create_namespaced_pod("default", pod_body("st", schedulerName="nobody"))
    patched = api.patch_namespaced_pod_status(
        "st",
        "default",
        {"metadata": {"labels": {"ignored": "yes"}}, "status": {"message": "custom"}},
    )
    assert patched.status.message == "custom"
    assert "ignored" not in patched.metadata.labels
    pod = api.read_namespaced_pod("st", "default")
    pod.status.message = "overwritten?"
    pod.metadata.labels["kept"] = "yes"
    replaced = api.replace_namespaced_pod("st", "default", pod)
    assert replaced.status.message == "custom"
    assert replaced.metadata.labels["kept"] == "yes"
    node = api.read_node("gpu-h100-0")
    node.status.capacity["nvidia.com/gpu"] = "4"
    node.status.allocatable["nvidia.com/gpu"] = "4"
    updated = api.replace_node_status("gpu-h100-0", node)
    assert updated.status.allocatable["nvidia.com/gpu"] == "4"


def test_binding_subresource_assigns_a_node_once(emu: KubeEmulator, api: client.CoreV1Api) -> None:
    body = pod_body("bound", gpus=1, schedulerName="my-scheduler")
    api.create_namespaced_pod("default", body)
    emu.step()  # a pass of the default scheduler leaves another scheduler's pod alone
    assert api.read_namespaced_pod("bound", "default").spec.node_name is None
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "bound"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-a100-0"},
    }
    # like the apiserver, the emulator answers a Status, which the client cannot deserialize
    # as a V1Binding (kubernetes-client/python#547), hence _preload_content=False
    response = api.create_namespaced_pod_binding(
        "bound", "default", binding, _preload_content=False
    )
    assert json.loads(response.data)["status"] == "Success"
    wait_for(lambda: api.read_namespaced_pod("bound", "default").status.phase == "Running")
    assert api.read_namespaced_pod("bound", "default").spec.node_name == "gpu-a100-0"
    with pytest.raises(ApiException) as caught:
        api.create_namespaced_binding(  # the legacy /bindings endpoint
            "default", binding, _preload_content=False
        )
    assert caught.value.status == 409
    assert error_body(caught.value)["message"] == (
        'Operation cannot be fulfilled on pods/binding "bound": pod bound is already assigned '
        'to node "gpu-a100-0"'
    )


def test_pod_log_is_a_banner_once_the_container_runs(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    with emu.paused():
        api.create_namespaced_pod("default", pod_body("chatty"))
        emu.step()  # scheduled, its image pulling; the clock stands still until the block ends
        assert api.read_namespaced_pod("chatty", "default").status.container_statuses
        with pytest.raises(ApiException) as caught:
            api.read_namespaced_pod_log("chatty", "default")
    assert caught.value.status == 400
    assert error_body(caught.value)["message"] == (
        'container "main" in pod "chatty" is waiting to start: ContainerCreating'
    )
    wait_for(lambda: api.read_namespaced_pod("chatty", "default").status.phase == "Running")
    assert api.read_namespaced_pod_log("chatty", "default") == (
        "[kube emulator] container main of pod default/chatty is emulated (development "
        "stand-in): no process runs, so there is no output.\n"
    )


def test_foreground_deletion_waits_for_dependents(api: client.CoreV1Api) -> None:
    owner = api.create_namespaced_config_map("default", config_map("fg-owner"))
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "fg-owner", "uid": owner.metadata.uid}
    api.create_namespaced_config_map(
        "default", config_map("fg-dep", finalizers=["x/hold"], ownerReferences=[ref])
    )
    api.delete_namespaced_config_map("fg-owner", "default", propagation_policy="Foreground")
    wait_for(
        lambda: api.read_namespaced_config_map("fg-dep", "default").metadata.deletion_timestamp,
        what="the dependent to be deleted",
    )
    owner = api.read_namespaced_config_map("fg-owner", "default")
    assert owner.metadata.finalizers == ["foregroundDeletion"]
    api.patch_namespaced_config_map("fg-dep", "default", {"metadata": {"finalizers": None}})
    wait_for(lambda: not api.list_namespaced_config_map("default").items, what="the owner")


def test_delete_collection_and_pagination(api: client.CoreV1Api) -> None:
    for index in range(7):
        api.create_namespaced_config_map("default", config_map(f"p{index}", {"batch": "1"}))
    api.create_namespaced_config_map("default", config_map("keep"))
    first = api.list_namespaced_config_map("default", limit=3)
    assert [c.metadata.name for c in first.items] == ["keep", "p0", "p1"]
    assert first.metadata.remaining_item_count == 5
    second = api.list_namespaced_config_map("default", limit=3, _continue=first.metadata._continue)
    assert [c.metadata.name for c in second.items] == ["p2", "p3", "p4"]
    third = api.list_namespaced_config_map("default", limit=3, _continue=second.metadata._continue)
    assert [c.metadata.name for c in third.items] == ["p5", "p6"]
    assert third.metadata._continue is None
    api.delete_collection_namespaced_config_map("default", label_selector="batch=1")
    assert [c.metadata.name for c in api.list_namespaced_config_map("default").items] == ["keep"]


def test_field_validation_warn_drops_unknown_fields_with_a_warning(
    api: client.CoreV1Api,
) -> None:
    body = config_map("loose")
    body["surprise"] = True
    data, status, headers = api.api_client.call_api(
        "/api/v1/namespaces/default/configmaps",
        "POST",
        query_params=[("fieldValidation", "Warn")],
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body,
        response_type="object",
        _return_http_data_only=False,
    )
    assert status == 201
    assert "surprise" not in data
    assert headers["Warning"] == '299 - "unknown field \\"surprise\\""'
    with pytest.raises(ApiException) as caught:
        api.create_namespaced_config_map("default", {**body, "metadata": {"name": "strict"}})
    assert caught.value.status == 422


def test_dry_run_persists_nothing(api: client.CoreV1Api) -> None:
    created = api.create_namespaced_config_map("default", config_map("dry"), dry_run="All")
    assert created.metadata.uid
    assert api.list_namespaced_config_map("default").items == []


def test_a_paused_emulator_moves_only_when_stepped(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    def state() -> tuple[bool, str, list[str]]:
        pod = api.read_namespaced_pod("stepped", "default")
        reasons = [
            e.reason
            for e in api.list_namespaced_event(
                "default", field_selector="involvedObject.name=stepped"
            ).items
        ]
        return pod.spec.node_name is not None, pod.status.phase, reasons

    with emu.paused():
        api.create_namespaced_pod("default", pod_body("stepped", gpus=1))
        assert state() == (False, "Pending", [])
        emu.step()  # scheduled, and its kubelet starts pulling (pulls take 0.02 s)
        assert state() == (True, "Pending", ["Scheduled", "Pulling"])
        emu.step(0.05)
        assert state() == (
            True,
            "Pending",
            ["Scheduled", "Pulling", "Pulled", "Created", "Started"],
        )
        emu.step(0.05)
        assert state()[1] == "Running"
    with pytest.raises(ValueError):
        emu.step(-1)


def test_reset_takes_the_emulator_back_to_its_seeded_cluster(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    seeded = api.list_node().items
    rv = api.list_namespaced_pod("default").metadata.resource_version
    api.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
    api.create_namespaced_config_map("team", config_map("cfg"))
    api.create_namespaced_pod("default", pod_body("hog", gpus=8, nodeName="gpu-h100-1"))
    wait_for(lambda: api.read_namespaced_pod("hog", "default").status.phase == "Running")
    api.patch_node("gpu-h100-0", {"spec": {"unschedulable": True}})
    emu.lose_node("gpu-h100-1")
    emu.inject_api_fault(status=500, count=3, verb="list", resource="configmaps")
    emu.fail_image_pull("pytorch")
    emu.set_pull_delay(60)

    emu.reset()

    assert api.list_config_map_for_all_namespaces().items == []  # no fault left either
    assert api.list_pod_for_all_namespaces().items == []
    assert api.list_event_for_all_namespaces().items == []
    assert [n.metadata.name for n in api.list_namespace().items] == [
        "default",
        "kube-node-lease",
        "kube-public",
        "kube-system",
    ]
    nodes = api.list_node().items
    assert [(n.metadata.name, n.metadata.uid, n.spec, n.status.conditions) for n in nodes] == [
        (n.metadata.name, n.metadata.uid, n.spec, n.status.conditions) for n in seeded
    ]
    stream = watch.Watch()
    seen = []
    for event in stream.stream(
        api.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=5
    ):
        seen.append(event["type"])
        if event["type"] == "DELETED":
            stream.stop()
    assert (seen[0], seen[-1]) == ("ADDED", "DELETED")  # watchers saw the pod go
    api.create_namespaced_pod("default", pod_body("after", gpus=8, nodeName="gpu-h100-1"))
    wait_for(  # its 8 GPUs are free, its kubelet is back, and pulls are quick and succeed again
        lambda: api.read_namespaced_pod("after", "default").status.phase == "Running",
        what="a pod on the node the reset gave back",
    )


def test_validation_can_be_switched_off_but_apiserver_rules_remain() -> None:
    emu = start_emulator(validate=False)
    api = core_api(emu)
    try:
        body = config_map("lenient")
        body["surprise"] = True
        api.create_namespaced_config_map("default", body)
        with pytest.raises(ApiException) as caught:
            api.create_namespaced_config_map("default", config_map("Not_Valid"))
        assert caught.value.status == 422
    finally:
        api.api_client.close()
        emu.stop()


def test_concurrent_writers_get_unique_resource_versions(api: client.CoreV1Api) -> None:
    versions: list[int] = []
    lock = threading.Lock()

    def writer(prefix: str) -> None:
        local = core_api_from(api)
        for index in range(10):
            obj = local.create_namespaced_config_map("default", config_map(f"{prefix}-{index}"))
            with lock:
                versions.append(int(obj.metadata.resource_version))
        local.api_client.close()

    threads = [threading.Thread(target=writer, args=(f"w{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(versions) == 40
    assert len(set(versions)) == 40
    assert len(api.list_namespaced_config_map("default").items) == 40


def core_api_from(api: client.CoreV1Api) -> client.CoreV1Api:
    cfg = client.Configuration()
    cfg.host = api.api_client.configuration.host
    return client.CoreV1Api(client.ApiClient(cfg))


def test_stop_ends_open_watches() -> None:
    emu = start_emulator()
    api = core_api(emu)
    finished = threading.Event()

    def watcher() -> None:
        try:
            for _ in watch.Watch().stream(api.list_namespaced_pod, "default", timeout_seconds=60):
                pass
        except Exception:  # noqa: S110 - a closed connection is fine here
            pass
        finished.set()

    thread = threading.Thread(target=watcher, daemon=True)
    thread.start()
    wait_for(lambda: emu.open_watches == 1, what="the watch to be served")
    started = time.monotonic()
    emu.stop()
    assert finished.wait(5)
    assert time.monotonic() - started < 3
    api.api_client.close()


def test_cli_runs_in_the_foreground_and_exits_0_on_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devstack.kube",
            "--port",
            "0",
            "--kubeconfig",
            str(kubeconfig),
            "--fleet",
            "h100=1,cpu=1",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(kubeconfig.exists, timeout=20, what="the kubeconfig")
        found = re.search(r"server: (\S+)", kubeconfig.read_text())
        assert found is not None
        server = found.group(1)
        with urllib.request.urlopen(f"{server}/api/v1/nodes", timeout=5) as response:  # noqa: S310
            nodes = json.load(response)
        assert [n["metadata"]["name"] for n in nodes["items"]] == ["cpu-0", "gpu-h100-0"]
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0
    assert "development stand-in" in stderr
    assert re.search(
        r"kube-emulator request method=GET path=/api/v1/nodes verb=list "
        r"resource=nodes code=200 duration_ms=\S+",
        stderr,
    )


@pytest.mark.skipif(shutil.which(KUBECTL) is None, reason="kubectl is not installed at /usr/bin")
def test_kubectl_namespaces_pods_describe_events_and_delete(
    emu: KubeEmulator, tmp_path: Path
) -> None:
    kubeconfig = emu.write_kubeconfig(tmp_path / "kubeconfig")

    def kubectl(*args: str) -> str:
        result = subprocess.run(
            [KUBECTL, "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "c"), *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert kubectl("create", "namespace", "team").strip() == "namespace/team created"
    assert "team " in kubectl("get", "ns")
    manifest = tmp_path / "pod.json"
    manifest.write_text(
        json.dumps({**pod_body("job", gpus=2), "metadata": {"name": "job", "namespace": "team"}})
    )
    kubectl("apply", "-f", str(manifest))
    api = core_api(emu)
    try:
        wait_for(lambda: api.read_namespaced_pod("job", "team").status.phase == "Running")
        node = api.read_namespaced_pod("job", "team").spec.node_name
    finally:
        api.api_client.close()
    pods = kubectl("get", "pods", "-A").splitlines()
    assert pods[0].split() == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert pods[1].split()[:4] == ["team", "job", "1/1", "Running"]
    described = kubectl("describe", "node", node)
    assert "nvidia.com/gpu.product=" in described
    assert re.search(r"team\s+job\s+", described)
    events = kubectl("get", "events", "-n", "team")
    assert "Scheduled" in events and "Started" in events
    assert kubectl("delete", "pod", "job", "-n", "team").strip() == 'pod "job" deleted'
    assert (
        "No resources found"
        in subprocess.run(
            [
                KUBECTL,
                "--kubeconfig",
                str(kubeconfig),
                "--cache-dir",
                str(tmp_path / "c"),
                "get",
                "pods",
                "-n",
                "team",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stderr
    )
