"""The kube emulator's images: pull time by size and node bandwidth, what a node holds in
status.images, one pull for pods that share an image, pull policies, and DaemonSets."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from devstack.kube import KubeEmulator
from devstack.kube.images import BANDWIDTH_ANNOTATION, digest_name, normalize
from tests.devstack import GPU_TOLERATION, pod_body, wait_for

BIG = "registry.example/big:1"
NODE = "gpu-h100-0"


def reasons(api: client.CoreV1Api, name: str) -> list[str]:
    items = api.list_namespaced_event("default", field_selector=f"involvedObject.name={name}")
    return [e.reason for e in items.items]


def message(api: client.CoreV1Api, name: str, reason: str) -> str:
    items = api.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={name},reason={reason}"
    ).items
    return str(items[0].message)


def phase(api: client.CoreV1Api, name: str) -> str:
    return str(api.read_namespaced_pod(name, "default").status.phase)


def pulled(api: client.CoreV1Api, name: str) -> bool:
    return "Pulled" in reasons(api, name)


def node_images(api: client.CoreV1Api, node: str = NODE) -> list[tuple[list[str], int]]:
    return [(i.names, i.size_bytes) for i in api.read_node(node).status.images or []]


def test_names_are_normalized_as_containerd_lists_them() -> None:
    assert normalize("busybox") == "docker.io/library/busybox:latest"
    assert normalize("starverse/pytorch:2.1") == "docker.io/starverse/pytorch:2.1"
    assert normalize("nvcr.io/nvidia/pytorch:24.05-py3") == "nvcr.io/nvidia/pytorch:24.05-py3"
    assert normalize("localhost/x@sha256:ab") == "localhost/x@sha256:ab"
    assert digest_name("starverse/pytorch:2.1").startswith("docker.io/starverse/pytorch@sha256:")


def test_a_pull_takes_size_over_bandwidth_and_the_node_then_lists_the_image(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    emu.set_image_size(BIG, 80_000_000)  # 80 MB at 800 MB/s: 0.1 s, plus the fixed 0.02 s
    with emu.paused():
        api.create_namespaced_pod("default", pod_body("p", image=BIG, nodeName=NODE))
        emu.step()
        assert reasons(api, "p") == ["Pulling"]
        emu.step(0.09)
        assert not pulled(api, "p")
        assert node_images(api) == []
        emu.step(0.02)  # the image is in; the fixed delay has still to pass
        assert not pulled(api, "p")
        assert node_images(api) == [([normalize(BIG), digest_name(BIG)], 80_000_000)]
        emu.step(0.02)
        assert pulled(api, "p")
        assert message(api, "p", "Pulled") == (
            f'Successfully pulled image "{BIG}" in 120ms (130ms including waiting). '
            "Image size: 80000000 bytes."
        )
        assert node_images(api) == [([normalize(BIG), digest_name(BIG)], 80_000_000)]
        assert node_images(api, "gpu-h100-1") == []

        # the next pod of that image on the node finds it there: the fixed delay only
        api.create_namespaced_pod("default", pod_body("q", image=BIG, nodeName=NODE))
        emu.step()
        emu.step(0.02)
        assert reasons(api, "q") == ["Pulled", "Created", "Started"]
        assert message(api, "q", "Pulled") == f'Container image "{BIG}" already present on machine'


def test_a_node_bandwidth_annotation_sets_its_pull_speed(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    emu.set_image_size(BIG, 80_000_000)
    api.patch_node(NODE, {"metadata": {"annotations": {BANDWIDTH_ANNOTATION: "100"}}})
    with emu.paused():
        api.create_namespaced_pod("default", pod_body("slow", image=BIG, nodeName=NODE))
        emu.step()
        emu.step(0.8)  # 80 MB at 100 MB/s: 0.8 s + 0.02 s
        assert not pulled(api, "slow")
        emu.step(0.03)
        assert pulled(api, "slow")


def test_pods_sharing_an_image_on_a_node_share_one_pull_and_pulls_queue(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    emu.set_image_size(BIG, 80_000_000)
    emu.set_image_size("registry.example/other:1", 80_000_000)
    with emu.paused():
        for name in ("a", "b"):
            api.create_namespaced_pod("default", pod_body(name, image=BIG, nodeName=NODE))
        api.create_namespaced_pod(
            "default", pod_body("c", image="registry.example/other:1", nodeName=NODE)
        )
        emu.step()
        emu.step(0.13)
        # a and b shared the first pull (0.1 s); c's pull waited for it (0.2 s in all)
        assert (pulled(api, "a"), pulled(api, "b"), pulled(api, "c")) == (True, True, False)
        emu.step(0.1)
        assert pulled(api, "c")
    assert [names[0] for names, _size in node_images(api)] == [
        "registry.example/big:1",
        "registry.example/other:1",
    ]


def test_pull_policy_always_pulls_an_image_the_node_holds(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    emu.set_image_size(BIG, 80_000_000)
    emu.preload_image(NODE, BIG)
    assert node_images(api) == [([normalize(BIG), digest_name(BIG)], 80_000_000)]
    body = pod_body("always", image=BIG, nodeName=NODE)
    body["spec"]["containers"][0]["imagePullPolicy"] = "Always"
    with emu.paused():
        api.create_namespaced_pod("default", body)
        api.create_namespaced_pod("default", pod_body("present", image=BIG, nodeName=NODE))
        emu.step()
        emu.step(0.03)
        assert reasons(api, "present") == ["Pulled", "Created", "Started"]
        assert reasons(api, "always") == ["Pulling"]
        emu.step(0.1)
        assert pulled(api, "always")


def test_reset_forgets_pulled_images_and_sizes(emu: KubeEmulator, api: client.CoreV1Api) -> None:
    emu.set_image_size(BIG, 5)
    emu.preload_image(NODE, BIG)
    emu.reset()
    assert node_images(api) == []
    assert emu.images.size(BIG) == 0


# --- DaemonSets ---------------------------------------------------------------------------


def daemon_set(image: str, product: str = "NVIDIA-H100-80GB-HBM3") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "prepull", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "prepull"}},
            "template": {
                "metadata": {"labels": {"app": "prepull"}},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.product": product},
                    "tolerations": [GPU_TOLERATION],
                    "initContainers": [{"name": "pull", "image": image, "command": ["true"]}],
                    "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.9"}],
                },
            },
        },
    }


def ds_pods(api: client.CoreV1Api) -> list[tuple[str, str]]:
    items = api.list_namespaced_pod("default", label_selector="app=prepull").items
    return sorted(
        (p.spec.node_name, p.spec.init_containers[0].image)
        for p in items
        if p.metadata.deletion_timestamp is None
    )


def test_a_daemon_set_runs_one_pod_per_selected_node_and_rolls_and_goes(
    emu: KubeEmulator, api: client.CoreV1Api, kubeconfig: str
) -> None:
    from kubernetes import config

    apps = client.AppsV1Api(config.new_client_from_config(config_file=kubeconfig))
    apps.create_namespaced_daemon_set("default", daemon_set("registry.example/one:1"))
    want = [("gpu-h100-0", "registry.example/one:1"), ("gpu-h100-1", "registry.example/one:1")]
    wait_for(lambda: ds_pods(api) == want, what="one pod on each H100 node")

    def ready() -> Any:
        status = apps.read_namespaced_daemon_set("prepull", "default").status
        return status.number_ready == 2 and status

    status = wait_for(ready, what="both ready")
    assert (status.desired_number_scheduled, status.current_number_scheduled) == (2, 2)
    assert (status.number_misscheduled, status.number_unavailable) == (0, None)
    # the init container's image is pulled onto the nodes and listed there
    for node in ("gpu-h100-0", "gpu-h100-1"):
        assert normalize("registry.example/one:1") in {
            name for names, _size in node_images(api, node) for name in names
        }
    assert node_images(api, "gpu-a100-0") == []

    apps.patch_namespaced_daemon_set(
        "prepull",
        "default",
        {"spec": {"template": {"spec": {"initContainers": [
            {"name": "pull", "image": "registry.example/two:1", "command": ["true"]}
        ]}}}},
    )  # fmt: skip
    want = [("gpu-h100-0", "registry.example/two:1"), ("gpu-h100-1", "registry.example/two:1")]
    wait_for(lambda: ds_pods(api) == want, what="the pods replaced by the new template")

    apps.delete_namespaced_daemon_set("prepull", "default")
    wait_for(lambda: ds_pods(api) == [], what="the pods collected with their DaemonSet")
