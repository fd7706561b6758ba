"""The simulated source, following a tiny fake Kubernetes API (stdlib http.server)."""

from typing import Any

from nodeagent import metrics as m
from nodeagent.sim import LOAD_ANNOTATION, KubeClient, SimSource, busy_gpus, product_name
from tests.nodeagent import (
    FakeKube,
    FakePlatform,
    FixedClock,
    free_port,
    kube_node,
    kube_pod,
    run_python,
    serving,
)

NODE = "gpu-h100-01"
H100_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/cuda.driver.major": "550",
    "nvidia.com/cuda.driver.minor": "54",
    "nvidia.com/cuda.driver.rev": "15",
    "nvidia.com/cuda.runtime.major": "12",
    "nvidia.com/cuda.runtime.minor": "4",
}


def cluster() -> FakeKube:
    return FakeKube(
        kube_node(NODE, H100_LABELS),
        [
            kube_pod("train-7f9c", NODE, "Running", 2),
            kube_pod("queued-2b1d", NODE, "Pending", 4),
            kube_pod("done-0a11", NODE, "Succeeded", 1),
            kube_pod("web-11aa", NODE, "Running", 0),
            kube_pod("elsewhere-9e2e", "gpu-h100-02", "Running", 8),
        ],
    )


def assert_busy(values: dict[str, Any]) -> None:
    assert 85 <= values[m.GPU_UTIL] <= 100
    assert 0.75 * 81559 <= values[m.FB_USED] <= 0.975 * 81559  # 60-78 GB of 80
    assert values[m.FB_USED] + values[m.FB_FREE] == values[m.FB_TOTAL] == 81559
    assert 60 <= values[m.GPU_TEMP] <= 75
    assert 550 <= values[m.POWER_USAGE] <= 700
    assert values[m.POWER_MGMT_LIMIT] == 700.0
    assert values[m.COMPUTE_PROCESSES] == 1


def assert_idle(values: dict[str, Any]) -> None:
    assert values[m.GPU_UTIL] == 0
    assert values[m.MEM_COPY_UTIL] == 0
    assert 480 <= values[m.FB_USED] <= 560  # about 0.5 GB
    assert 30 <= values[m.GPU_TEMP] <= 36
    assert 70 <= values[m.POWER_USAGE] <= 90
    assert values[m.SM_CLOCK] == 345
    assert values[m.COMPUTE_PROCESSES] == 0


def test_a_running_pod_with_two_gpus_makes_gpus_0_and_1_busy() -> None:
    with serving(cluster()) as kube:
        sim = SimSource(NODE, KubeClient(kube.url), clock=FixedClock())
        snapshot = sim.sample()
        later = [sim.sample() for _ in range(5)]

    assert snapshot["at"] == "2026-11-29T21:00:15Z"
    assert snapshot["lost"] == []
    assert [gpu["index"] for gpu in snapshot["gpus"]] == list(range(8))
    for each in [snapshot, *later]:
        for gpu in each["gpus"]:
            assert list(gpu["metrics"]) == list(m.METRIC_NAMES)
            (assert_busy if gpu["index"] < 2 else assert_idle)(gpu["metrics"])
    assert kube.requests[0] == f"/api/v1/nodes/{NODE}"
    assert kube.requests[1] == f"/api/v1/pods?fieldSelector=spec.nodeName%3D{NODE}"


def test_inventory_and_driver_come_from_the_node_labels() -> None:
    with serving(cluster()) as kube:
        sim = SimSource(NODE, KubeClient(kube.url))
    inventory = sim.inventory()
    assert len(inventory) == 8
    assert inventory[0]["product"] == "NVIDIA H100 80GB HBM3"
    assert inventory[0]["memory_total_mb"] == 81559
    assert inventory[0]["nvlink_links"] == 18
    assert inventory[0]["pci_bus_id"] == "00000000:18:00.0"
    assert inventory[0]["uuid"].startswith("GPU-")
    assert len({gpu["uuid"] for gpu in inventory}) == 8
    assert sim.driver() == {
        "driver_version": "550.54.15",
        "cuda_version": "12.4",
        "nvml_version": "12.550.54.15",
    }


def test_the_simulation_is_seeded_by_the_node_name() -> None:
    with serving(cluster()) as kube:
        first = SimSource(NODE, KubeClient(kube.url), clock=FixedClock())
        second = SimSource(NODE, KubeClient(kube.url), clock=FixedClock())
        other = SimSource("gpu-h100-09", KubeClient(kube.url), clock=FixedClock())
        runs = [[source.sample() for _ in range(3)] for source in (first, second, other)]
    assert runs[0] == runs[1]
    assert runs[0][0]["gpus"][0]["metrics"] != runs[2][0]["gpus"][0]["metrics"]
    assert first.inventory() == second.inventory()


def test_gpus_ramp_down_smoothly_when_the_pod_ends() -> None:
    kube = cluster()
    with serving(kube):
        sim = SimSource(NODE, KubeClient(kube.url))
        assert_busy(sim.sample()["gpus"][1]["metrics"])
        kube.pods[0]["status"]["phase"] = "Succeeded"
        ramp: list[float] = []
        for _ in range(6):
            util = sim.sample()["gpus"][1]["metrics"][m.GPU_UTIL]
            assert util is not None
            ramp.append(util)
    assert 0 < ramp[0] < 85
    assert ramp == sorted(ramp, reverse=True)
    assert ramp[-1] == 0


def test_without_the_api_the_simulation_keeps_going_on_defaults() -> None:
    sim = SimSource(NODE, KubeClient(f"http://127.0.0.1:{free_port()}", timeout=1))
    snapshot = sim.sample()
    assert len(snapshot["gpus"]) == 8
    assert sim.inventory()[0]["product"] == "NVIDIA H100 80GB HBM3"
    for gpu in snapshot["gpus"]:
        assert_idle(gpu["metrics"])


def test_gpu_counting_and_product_names() -> None:
    pods = [
        kube_pod("a", NODE, "Running", 2),
        kube_pod("b", NODE, "Pending", 4),
        kube_pod("c", NODE, "Running", 3),
    ]
    assert busy_gpus(pods) == 5
    assert product_name("NVIDIA-A100-SXM4-80GB") == "NVIDIA A100-SXM4-80GB"
    assert product_name("NVIDIA-H100-80GB-HBM3-SHARED") == "NVIDIA H100 80GB HBM3"
    assert product_name("NVIDIA-B200") == "NVIDIA B200"


def test_cli_sim_source_reports_once() -> None:
    with serving(cluster()) as kube, serving(FakePlatform()) as platform:
        result = run_python(
            [
                "-m",
                "nodeagent",
                "--source",
                "sim",
                "--kube-url",
                kube.url,
                "--platform-url",
                platform.url,
                "--node",
                NODE,
                "--token",
                "svn_test",
                "--once",
            ]
        )
    assert result.returncode == 0, result.stderr
    [body] = platform.bodies()
    utils = [gpu["metrics"][m.GPU_UTIL] for gpu in body["samples"][0]["gpus"]]
    assert [value >= 85 for value in utils] == [True, True] + [False] * 6
    assert utils[2:] == [0] * 6
    assert platform.requests[0]["headers"]["Authorization"] == "Bearer svn_test"


def test_a_pods_load_annotation_sets_how_hard_its_gpus_work() -> None:
    kube = cluster()
    with serving(kube):
        sim = SimSource(NODE, KubeClient(kube.url))
        assert_busy(sim.sample()["gpus"][1]["metrics"])
        # what `kubectl annotate pod … emulator.starverse.io/gpu-load=0` does
        kube.pods[0].setdefault("metadata", {})["annotations"] = {LOAD_ANNOTATION: "0"}
        for _ in range(6):
            gpus = sim.sample()["gpus"]
        assert_idle(gpus[1]["metrics"])
        kube.pods[0]["metadata"]["annotations"] = {LOAD_ANNOTATION: "0.5"}
        for _ in range(6):
            half = sim.sample()["gpus"][1]["metrics"][m.GPU_UTIL]
        assert half is not None and 40 <= half <= 52
        kube.pods[0]["metadata"]["annotations"] = {LOAD_ANNOTATION: "lots"}
        for _ in range(6):
            gpus = sim.sample()["gpus"]
        assert_busy(gpus[1]["metrics"])  # not a number: the default, full load
