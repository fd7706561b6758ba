"""The agent's GPU metrics for Prometheus: dcgm-exporter's names and labels, scraped over HTTP
and parsed, following the simulated GPUs of a node whose pods a fake Kubernetes API lists."""

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from nodeagent import metrics as m
from nodeagent.agent import Agent
from nodeagent.exporter import GpuCollector, serve
from nodeagent.report import Reporter
from nodeagent.sim import KubeClient, SimSource
from tests.nodeagent import FakeKube, FakePlatform, FixedClock, kube_node, kube_pod, serving
from tests.nodeagent.test_sim import H100_LABELS, NODE

PRODUCT = "NVIDIA H100 80GB HBM3"


def scrape(port: int) -> dict[str, list]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        assert answer.status == 200
        text = answer.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_the_agent_serves_its_gpus_under_dcgm_names_with_the_pod_using_each():
    kube = FakeKube(
        kube_node(NODE, H100_LABELS),
        [kube_pod("train-7f9c", NODE, "Running", 2), kube_pod("queued-2b1d", NODE, "Pending", 4)],
    )
    with serving(kube), serving(FakePlatform()) as platform:
        source = SimSource(NODE, KubeClient(kube.url), clock=FixedClock())
        collector = GpuCollector(NODE)
        server = serve(collector, 0, host="127.0.0.1")
        try:
            before = scrape(server.server_address[1])
            agent = Agent(source, Reporter(platform.url, NODE, "tok"), exporter=collector)
            for _ in range(4):  # the simulated load settles in a few samples
                agent.collect()
            families = scrape(server.server_address[1])
        finally:
            server.shutdown()

    assert before[m.GPU_UTIL] == []  # nothing before the first sample
    assert set(families) == set(m.METRIC_NAMES)
    util = {int(s.labels["gpu"]): s for s in families[m.GPU_UTIL]}
    assert sorted(util) == list(range(8))
    busy = util[0].labels
    assert busy["UUID"].startswith("GPU-")
    assert (busy["modelName"], busy["Hostname"], busy["device"]) == (PRODUCT, NODE, "nvidia0")
    assert (busy["namespace"], busy["pod"], busy["container"]) == ("tenant-a", "train-7f9c", "main")
    assert util[1].labels["pod"] == "train-7f9c"
    assert (util[2].labels["namespace"], util[2].labels["pod"]) == ("", "")  # idle: nobody's
    assert util[0].value >= 85 and util[2].value == 0
    fb_total = {s.labels["gpu"]: s.value for s in families[m.FB_TOTAL]}
    assert set(fb_total.values()) == {81559.0}
    temps = [s.value for s in families[m.GPU_TEMP]]
    assert all(25 <= t <= 80 for t in temps)


def test_unsupported_fields_have_no_sample_and_other_paths_are_404():
    collector = GpuCollector("gpu-4090-0")
    collector.update(
        [
            {
                "index": 0,
                "uuid": "GPU-1",
                "pci_bus_id": None,
                "product": "NVIDIA GeForce RTX 4090",
                "serial": None,
                "vbios": None,
                "memory_total_mb": 24564,
                "nvlink_links": None,
            }
        ],
        {
            "at": "2026-12-01T00:00:00Z",
            "lost": [],
            "gpus": [
                {
                    "index": 0,
                    "uuid": "GPU-1",
                    "metrics": {m.GPU_UTIL: 12, m.ECC_DBE_VOL_TOTAL: None},
                }
            ],
        },
    )
    server = serve(collector, 0, host="127.0.0.1")
    try:
        families = scrape(server.server_address[1])
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/", timeout=5)
            raise AssertionError("expected 404")
        except urllib.error.HTTPError as error:
            assert error.code == 404
    finally:
        server.shutdown()

    assert [s.value for s in families[m.GPU_UTIL]] == [12.0]
    assert families[m.ECC_DBE_VOL_TOTAL] == []
