from datetime import timedelta

import pytest
from django.contrib.admin.utils import quote
from django.utils import timezone

from fleet.choices import NodeState
from fleet.liveness import AGENT_REPORTS, LeaseClock, node_lease_lost
from fleet.models import Gpu, GpuRollup, GpuSample, HealthRule, Node, NodeEvent
from fleet.selectors import node_agent_fault
from fleet.services import (
    health_rules_ensure_defaults,
    heartbeats_check,
    node_review_request,
    node_token_issue,
    node_transition,
    telemetry_prune,
    telemetry_rollup,
)
from starverse.core.kube import LeaseSeen
from tests.factories import make_operator, make_user, staff_login

H100 = "NVIDIA H100 80GB HBM3"


def _iso(when=None):
    return (when or timezone.now()).isoformat().replace("+00:00", "Z")


def _report(node="gpu-h100-01", gpus=8, util=87, events=(), lost=(), dbe=0, at=None):
    inventory = [
        {
            "index": i,
            "uuid": f"GPU-{node}-{i}",
            "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0",
            "product": H100,
            "serial": None,
            "vbios": "96.00.89.00.01",
            "memory_total_mb": 81559,
            "nvlink_links": 18,
        }
        for i in range(gpus)
    ]
    metrics = {
        "DCGM_FI_DEV_GPU_UTIL": util,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 40,
        "DCGM_FI_DEV_FB_USED": 61234,
        "DCGM_FI_DEV_GPU_TEMP": 64,
        "DCGM_FI_DEV_POWER_USAGE": 612.5,
        "DCGM_FI_DEV_SM_CLOCK": 1980,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": dbe,
        "DCGM_FI_DEV_MEMORY_TEMP": None,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
    }
    return {
        "agent_version": "0.1.0",
        "node": node,
        "sent_at": _iso(),
        "driver": {
            "driver_version": "550.54.15",
            "cuda_version": "12.4",
            "nvml_version": "12.550.54.15",
        },
        "inventory": inventory,
        "samples": [
            {
                "at": _iso(at),
                "gpus": [
                    {"index": i, "uuid": f"GPU-{node}-{i}", "metrics": dict(metrics)}
                    for i in range(gpus)
                    if i not in [x["index"] for x in lost]
                ],
            }
        ],
        "events": list(events),
        "lost_gpus": list(lost),
        "dropped_reports": 0,
    }


@pytest.fixture
def node(db):
    # The default health rules come from a data migration that a transactional test run
    # earlier in this process has flushed.
    health_rules_ensure_defaults()
    return Node.objects.create(
        name="gpu-h100-01",
        gpu_product=H100,
        gpu_count=8,
        gpu_memory_mb=81559,
        interconnect="nvlink",
    )


@pytest.fixture
def agent(node, api):
    token = node_token_issue(node=node)

    def post(body, token=token, name=node.name):
        return api.post(
            f"/api/v1/nodes/{name}/report",
            body,
            format="json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
        )

    return post


def test_a_report_stores_samples_inventory_and_heartbeat(agent, node):
    response = agent(_report())

    assert response.status_code == 202
    assert response.json() == {"accepted_samples": 8, "refused": []}
    node.refresh_from_db()
    assert (node.driver_version, node.cuda_version, node.agent_version) == (
        "550.54.15",
        "12.4",
        "0.1.0",
    )
    assert node.last_report_at is not None
    assert Gpu.objects.filter(node=node).count() == 8
    sample = GpuSample.objects.get(gpu__index=0)
    assert (sample.util, sample.mem_used_mb, sample.temp_c, sample.power_w) == (
        87,
        61234,
        64,
        612.5,
    )


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r.pop("samples"), "samples: must be a list"),
        (lambda r: r["samples"][0].update(at="yesterday"), "samples[0].at"),
        (
            lambda r: r["samples"][0]["gpus"][2]["metrics"].update(DCGM_FI_DEV_GPU_UTIL="high"),
            "samples[0].gpus[2].metrics.DCGM_FI_DEV_GPU_UTIL",
        ),
        (lambda r: r["inventory"][1].update(index=-1), "inventory[1].index"),
        (lambda r: r.update(node="someone-else"), "node: does not match"),
        (
            lambda r: r["samples"][0].update(at=_iso(timezone.now() + timedelta(hours=1))),
            "in the future",
        ),
    ],
)
def test_bad_reports_are_400_naming_the_field_and_store_nothing(agent, node, mutate, field):
    body = _report()
    mutate(body)

    response = agent(body)

    assert response.status_code == 400
    assert field in response.json()["detail"]
    assert GpuSample.objects.count() == 0
    assert Gpu.objects.count() == 0
    node.refresh_from_db()
    assert node.last_report_at is None


def test_metrics_out_of_range_are_refused_one_by_one_and_the_heartbeat_is_kept(agent, node):
    node_transition(node=node, to=NodeState.DOWN, reason="heartbeat lost", kind="heartbeat")
    body = _report()
    gpus = body["samples"][0]["gpus"]
    gpus[1]["metrics"]["DCGM_FI_DEV_GPU_TEMP"] = 1e9
    gpus[2]["metrics"]["DCGM_FI_DEV_POWER_USAGE"] = -5
    gpus[3]["metrics"]["DCGM_FI_DEV_GPU_UTIL"] = 400
    gpus[4]["metrics"]["DCGM_FI_DEV_FB_USED"] = 2**40
    gpus[5]["metrics"]["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] = 2**40

    response = agent(body)

    assert response.status_code == 202
    assert response.json() == {
        "accepted_samples": 8,
        "refused": [
            {"gpu": 1, "field": "DCGM_FI_DEV_GPU_TEMP", "reason": "1e+09 is outside -40..150"},
            {"gpu": 2, "field": "DCGM_FI_DEV_POWER_USAGE", "reason": "-5 is outside 0..10000"},
            {"gpu": 3, "field": "DCGM_FI_DEV_GPU_UTIL", "reason": "400 is outside 0..100"},
            {
                "gpu": 4,
                "field": "DCGM_FI_DEV_FB_USED",
                "reason": "1.09951e+12 is outside 0..1.67772e+07",
            },
            {
                "gpu": 5,
                "field": "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                "reason": "1.09951e+12 is outside 0..2.14748e+09",
            },
        ],
    }
    rows = {
        s.gpu.index: (s.util, s.mem_used_mb, s.temp_c, s.power_w, s.ecc_dbe)
        for s in GpuSample.objects.select_related("gpu")
    }
    assert rows[0] == (87, 61234, 64, 612.5, 0)
    assert rows[1] == (87, 61234, None, 612.5, 0)
    assert rows[2] == (87, 61234, 64, None, 0)
    assert rows[3] == (None, 61234, 64, 612.5, 0)
    assert rows[4] == (87, None, 64, 612.5, 0)
    assert rows[5] == (87, 61234, 64, 612.5, None)
    node.refresh_from_db()
    assert node.last_report_at is not None
    assert node.state == NodeState.READY


def test_a_backlog_refuses_a_bad_metric_once_per_gpu(agent, node):
    body = _report()
    second = {"at": body["samples"][0]["at"], "gpus": body["samples"][0]["gpus"]}
    body["samples"] = [second, second]
    second["gpus"][0]["metrics"]["DCGM_FI_DEV_SM_CLOCK"] = -1

    response = agent(body)

    assert response.status_code == 202
    assert response.json()["refused"] == [
        {"gpu": 0, "field": "DCGM_FI_DEV_SM_CLOCK", "reason": "-1 is outside 0..10000"}
    ]
    assert GpuSample.objects.count() == 16


def test_wrong_token_or_unknown_node_is_401(agent, node):
    good = node_token_issue(node=node)
    typo = good[:-1] + ("A" if good[-1] != "A" else "B")

    assert agent(_report(), token=typo).status_code == 401
    assert agent(_report(), token="sv_" + good[4:]).status_code == 401
    assert agent(_report(node="gpu-other"), token=good, name="gpu-other").status_code == 401
    assert agent(_report(), token=good).status_code == 202


def test_critical_xid_cordons_the_node_with_a_reason(agent, node):
    xid = {
        "at": _iso(),
        "type": "xid",
        "gpu": 3,
        "uuid": "GPU-gpu-h100-01-3",
        "xid": 79,
        "message": "GPU has fallen off the bus",
    }

    agent(_report(events=[xid]))

    node.refresh_from_db()
    assert node.state == NodeState.CORDONED
    assert node.state_reason == "critical XID 79 on GPU 3 (rule critical-xid)"
    kinds = sorted(NodeEvent.objects.filter(node=node).values_list("kind", "code"))
    assert kinds == [("xid", 79), ("xid", 79)]  # the XID itself, and the state change it caused


def test_a_harmless_xid_is_recorded_but_does_not_cordon(agent, node):
    agent(
        _report(
            events=[
                {
                    "at": _iso(),
                    "type": "xid",
                    "gpu": 1,
                    "uuid": "GPU-gpu-h100-01-1",
                    "xid": 13,
                    "message": "Graphics Engine Exception",
                }
            ]
        )
    )

    node.refresh_from_db()
    assert node.state == NodeState.READY
    assert NodeEvent.objects.get(node=node).code == 13


def test_lost_gpu_and_uncorrectable_ecc_cordon(agent, node, db):
    agent(_report(lost=[{"index": 5, "uuid": "GPU-gpu-h100-01-5", "error": "GpuIsLost"}]))

    node.refresh_from_db()
    assert node.state == NodeState.CORDONED
    assert "GPU 5 lost (GpuIsLost" in node.state_reason
    assert Gpu.objects.get(node=node, index=5).lost_at is not None

    other = Node.objects.create(
        name="gpu-h100-02", gpu_product=H100, gpu_count=8, gpu_memory_mb=81559
    )
    token = node_token_issue(node=other)
    agent(_report(node=other.name, dbe=2), token=token, name=other.name)
    other.refresh_from_db()
    assert other.state == NodeState.CORDONED
    assert other.state_reason.startswith("uncorrectable ECC errors on GPU 0")


def test_health_rules_are_data(agent, node):
    HealthRule.objects.filter(name="critical-xid").update(params={"xids": [48]})

    agent(
        _report(
            events=[
                {
                    "at": _iso(),
                    "type": "xid",
                    "gpu": 3,
                    "uuid": "GPU-gpu-h100-01-3",
                    "xid": 79,
                    "message": "",
                }
            ]
        )
    )

    node.refresh_from_db()
    assert node.state == NodeState.READY


def test_heartbeat_loss_takes_a_node_down_and_a_report_brings_it_back(agent, node):
    agent(_report())
    Node.objects.filter(pk=node.pk).update(last_report_at=timezone.now() - timedelta(seconds=61))

    assert heartbeats_check() == ["gpu-h100-01"]
    assert heartbeats_check() == []
    node.refresh_from_db()
    assert node.state == NodeState.DOWN
    assert node.state_reason.startswith("heartbeat lost: no report for 61 s")

    agent(_report())
    node.refresh_from_db()
    assert node.state == NodeState.READY


def test_a_report_does_not_undo_an_operator_cordon(agent, node):
    from fleet.services import node_cordon

    node_cordon(node=node, reason="maintenance window", actor=make_operator())
    agent(_report())

    node.refresh_from_db()
    assert (node.state, node.state_reason) == (NodeState.CORDONED, "maintenance window")


def test_rollups_and_retention(agent, node):
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=3)
    for second, util in ((5, 80), (20, 90), (35, 100)):
        agent(_report(util=util, at=start + timedelta(seconds=second)))
    old = start - timedelta(hours=25)
    gpu = Gpu.objects.get(node=node, index=0)
    GpuSample.objects.create(gpu=gpu, at=old, util=1)
    GpuRollup.objects.create(gpu=gpu, minute=start - timedelta(days=31), samples=1)

    # 8 GPUs × the one minute, plus the old sample's minute
    assert telemetry_rollup(since=start - timedelta(days=2)) == 9
    assert telemetry_rollup(since=start - timedelta(days=2)) == 9  # idempotent: upserts
    assert GpuRollup.objects.count() == 10
    rollup = GpuRollup.objects.get(gpu=gpu, minute=start)
    assert (rollup.samples, rollup.util_avg, rollup.temp_c_max) == (3, 90.0, 64)
    assert telemetry_prune() == (1, 1)
    assert not GpuSample.objects.filter(at=old).exists()


def test_fleet_api_is_staff_only(agent, node, client_for):
    agent(_report(util=55))
    renter = client_for(make_user())
    staff = client_for(make_operator())

    assert renter.get("/api/v1/nodes").status_code == 403
    assert renter.get("/api/v1/nodes/capacity").status_code == 403
    listing = staff.get("/api/v1/nodes").json()
    capacity = staff.get("/api/v1/nodes/capacity").json()

    assert listing["count"] == 1
    row = listing["results"][0]
    assert (row["name"], row["state"], row["gpu_count"]) == ("gpu-h100-01", "ready", 8)
    assert row["gpus"][0]["util"] == 55 and row["gpus"][0]["uuid"] == "GPU-gpu-h100-01-0"
    assert capacity["results"] == [
        {"gpu_product": H100, "total": 8, "allocated": 0, "unhealthy": 0, "free": 8}
    ]


def test_cordoned_nodes_leave_free_capacity(agent, node, client, db):
    operator = make_operator()
    staff_login(client, operator)
    Node.objects.create(name="gpu-h100-02", gpu_product=H100, gpu_count=8, gpu_memory_mb=81559)

    form = client.post(f"/admin/fleet/node/{node.pk}/cordon/", {"reason": "fan failure"})
    page = client.get("/admin/fleet/node/")

    assert form.status_code == 302
    node.refresh_from_db()
    assert node.state == NodeState.CORDONED
    assert NodeEvent.objects.filter(node=node, message__contains=operator.email).exists()
    assert page.status_code == 200
    from compute.selectors import capacity_by_model

    assert capacity_by_model() == [
        {"gpu_product": H100, "total": 16, "allocated": 0, "unhealthy": 8, "free": 8}
    ]
    client.post(f"/admin/fleet/node/{node.pk}/uncordon/")
    node.refresh_from_db()
    assert node.state == NodeState.READY


def test_agents_register_with_the_bootstrap_token(api, db, settings):
    settings.NODE_BOOTSTRAP_TOKEN = "boot-7f3a9c"
    body = {
        "name": "gpu-new-01",
        "bootstrap_token": "boot-7f3a9c",
        "gpu_product": H100,
        "gpu_count": 8,
        "gpu_memory_mb": 81559,
    }

    wrong = api.post("/api/v1/nodes/register", {**body, "bootstrap_token": "guess"}, format="json")
    assert wrong.status_code == 401
    assert Node.objects.count() == 0

    right = api.post("/api/v1/nodes/register", body, format="json")
    assert right.status_code == 201
    token = right.json()["token"]
    assert token.startswith("svn_")
    report = api.post(
        "/api/v1/nodes/gpu-new-01/report",
        _report(node="gpu-new-01"),
        format="json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert report.status_code == 202
    assert NodeEvent.objects.filter(node__name="gpu-new-01", kind="registered").count() == 1


@pytest.fixture
def bootstrap(api, settings):
    settings.NODE_BOOTSTRAP_TOKEN = "boot-7f3a9c"

    def register(name):
        body = {
            "name": name,
            "bootstrap_token": "boot-7f3a9c",
            "gpu_product": H100,
            "gpu_count": 8,
            "gpu_memory_mb": 81559,
        }
        return api.post("/api/v1/nodes/register", body, format="json")

    return register


def test_registering_a_registered_node_again_is_refused_and_its_agent_keeps_working(
    agent, node, bootstrap
):
    before = Node.objects.values_list("token_hash", "token_prefix").get(pk=node.pk)

    response = bootstrap(node.name)

    assert response.status_code == 409
    assert response.json()["code"] == "node_exists"
    assert '"New agent token" in the admin' in response.json()["detail"]
    assert Node.objects.values_list("token_hash", "token_prefix").get(pk=node.pk) == before
    assert Node.objects.count() == 1
    assert agent(_report()).status_code == 202


def test_a_node_found_in_the_cluster_registers_once(db, bootstrap):
    Node.objects.create(
        name="gpu-found-01", gpu_product=H100, gpu_count=8, gpu_memory_mb=81559, in_cluster=True
    )

    first = bootstrap("gpu-found-01")
    again = bootstrap("gpu-found-01")

    assert first.status_code == 201
    assert first.json()["token"].startswith("svn_")
    assert again.status_code == 409
    node = Node.objects.get(name="gpu-found-01")
    assert node.in_cluster is True
    assert node.token_prefix == first.json()["token"][: len(node.token_prefix)]


def test_the_bootstrap_token_is_compared_in_constant_time(db, bootstrap, monkeypatch):
    import hmac

    calls = []
    real = hmac.compare_digest

    def compare(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", compare)

    assert bootstrap("gpu-new-02").status_code == 201
    assert calls == [(b"boot-7f3a9c", b"boot-7f3a9c")]


def test_admin_fleet_page_shows_live_gpus(agent, node, client):
    agent(_report(util=55))
    staff_login(client, make_operator())

    page = client.get("/admin/fleet/node/").content.decode()

    assert "GPU 0: 55% · 64 °C · 612 W" in page
    assert "NVIDIA H100 80GB HBM3" in page


def test_admin_addresses_from_before_the_fleet_app_still_lead_to_the_pages(db, client):
    staff_login(client, make_operator())
    node = Node.objects.create(
        name="gpu-old-1", gpu_product="NVIDIA H100 80GB HBM3", gpu_count=8, gpu_memory_mb=81559
    )
    moved = client.post(f"/admin/instances/node/{node.pk}/cordon/?x=1", {"reason": "fan"})
    assert moved.status_code == 308
    assert moved["Location"] == f"/admin/fleet/node/{node.pk}/cordon/?x=1"
    assert (
        client.get("/admin/datasets/sharedstorage/")["Location"] == "/admin/storage/sharedstorage/"
    )
    assert client.get(moved["Location"]).status_code == 200
    # the catalog, the tenants' limits and the allocations went to the compute core
    for old, new in [
        ("/admin/instances/offering/", "/admin/compute/offering/"),
        ("/admin/instances/image/?q=cuda", "/admin/compute/image/?q=cuda"),
        ("/admin/instances/tenantlimits/add/", "/admin/compute/tenantlimits/add/"),
        ("/admin/fleet/allocation/", "/admin/compute/allocation/"),
    ]:
        assert client.get(old)["Location"] == new
    assert client.get("/admin/fleet/node/").status_code == 200  # not moved: no loop


def test_the_node_agents_fault_signal_is_its_own_hardware_reports(agent, node):
    since = timezone.now() - timedelta(hours=1)
    assert node_agent_fault(node, since=since) == ""
    harmless = {"at": _iso(), "type": "xid", "gpu": 1, "xid": 13, "message": "Graphics Engine"}
    agent(_report(events=[harmless]))  # a program's own fault, which a tenant can cause
    assert node_agent_fault(node, since=since) == ""
    old = {"at": _iso(since - timedelta(minutes=1)), "type": "xid", "gpu": 2, "xid": 92}
    agent(_report(events=[old]))
    assert node_agent_fault(node, since=since) == ""
    rate = {"at": _iso(), "type": "xid", "gpu": 2, "xid": 92, "message": "High SBE rate"}
    agent(_report(events=[rate]))

    node.refresh_from_db()
    assert node.state == NodeState.READY  # no rule acts on XID 92 alone
    found = node_agent_fault(node, since=since)
    assert found.startswith("XID 92 reported at ") and found.endswith(" UTC (High SBE rate)")


def test_uncorrectable_ecc_below_the_rules_threshold_is_a_fault_signal(agent, node):
    HealthRule.objects.filter(name="uncorrectable-ecc").update(params={"min_count": 4})
    agent(_report(dbe=1))

    node.refresh_from_db()
    assert node.state == NodeState.READY
    since = timezone.now() - timedelta(hours=1)
    assert node_agent_fault(node, since=since) == "uncorrectable ECC errors on GPU 0"


def test_an_operator_ends_a_review_by_cordoning_the_node_or_clearing_it(node, client):
    operator = make_operator()
    staff_login(client, operator)
    assert node_review_request(node=node, reason="pre-flight of cluster clu_a round 1") is True
    assert node_review_request(node=node, reason="pre-flight of cluster clu_b round 1") is False
    node.refresh_from_db()
    assert (node.state, node.review_reason) == ("ready", "pre-flight of cluster clu_a round 1")
    assert NodeEvent.objects.filter(node=node, kind="review").count() == 2
    listed = client.get("/admin/fleet/node/?review=yes").content.decode()
    assert node.name in listed and "Up for review" in listed
    page = client.get(f"/admin/fleet/node/{quote(node.pk)}/change/").content.decode()
    assert f"/admin/fleet/node/{node.pk}/review-cordon/" in page
    assert (
        "pre-flight of cluster clu_a round 1"
        in client.get(f"/admin/fleet/node/{node.pk}/review-clear/").content.decode()
    )

    assert client.post(f"/admin/fleet/node/{node.pk}/review-clear/").status_code == 302
    node.refresh_from_db()
    assert (node.state, node.review_since, node.review_reason) == ("ready", None, "")
    assert NodeEvent.objects.filter(
        node=node,
        message=f"Review cleared: pre-flight of cluster clu_a round 1 (by {operator.email})",
    ).exists()
    assert node.name not in client.get("/admin/fleet/node/?review=yes").content.decode()

    node_review_request(node=node, reason="pre-flight of cluster clu_c round 2")
    assert client.post(f"/admin/fleet/node/{node.pk}/review-cordon/").status_code == 302
    node.refresh_from_db()
    assert (node.state, node.review_since) == ("cordoned", None)
    assert node.state_reason == "review confirmed: pre-flight of cluster clu_c round 2"

    # nothing up for review: the operation says so and changes nothing
    answer = client.post(f"/admin/fleet/node/{node.pk}/review-cordon/", follow=True)
    assert f"The node {node.name} is not up for review." in answer.content.decode()
    node.refresh_from_db()
    assert node.state_reason == "review confirmed: pre-flight of cluster clu_c round 2"


# --- the node lease watch's verdict (fleet.liveness): a node whose kubelet's Lease went silent
# is down only when its agent is silent too; an agent (or its stolen token) keeps only its own
# node up, and only while it reports. The watch itself, on the emulator: tests/jobs/
# test_multinode.py and tests/devstack/test_kube_leases.py.


def _lost(node: Node, renewed_at) -> str:
    return node_lease_lost(
        name=node.name, region=str(node.region_id), silent_s=21, renewed_at=renewed_at
    )


def test_a_silent_lease_and_a_silent_agent_take_the_node_down_once(agent, node):
    agent(_report())
    renewed_at = timezone.now()  # the agent's last report came before the lease's last renewal
    assert _lost(node, renewed_at) == "down"
    node.refresh_from_db()
    assert node.state == NodeState.DOWN
    assert node.state_reason == (
        "node lost: its kubelet's lease not renewed for 21 s and no agent report since "
        "(node lease watch)"
    )
    assert _lost(node, renewed_at) == "unchanged"
    assert NodeEvent.objects.filter(node=node, kind="heartbeat").count() == 1


def test_an_agent_that_still_reports_keeps_its_node_up_until_it_is_silent_too(
    agent, node, settings
):
    renewed_at = timezone.now() - timedelta(seconds=21)
    agent(_report())  # after the last renewal, and recent: a stuck kubelet, a live node
    assert _lost(node, renewed_at) == AGENT_REPORTS
    node.refresh_from_db()
    assert node.state == NodeState.READY
    assert not NodeEvent.objects.filter(node=node, kind="heartbeat").exists()

    quiet = timezone.now() - timedelta(seconds=settings.NODE_AGENT_QUIET_S + 1)
    Node.objects.filter(pk=node.pk).update(last_report_at=quiet)
    assert _lost(node, renewed_at - timedelta(seconds=settings.NODE_AGENT_QUIET_S)) == "down"


def test_another_nodes_agent_reporting_does_not_keep_a_lost_node_up(agent, node):
    other = Node.objects.create(
        name="gpu-h100-02", gpu_product=node.gpu_product, gpu_count=8, gpu_memory_mb=81559
    )
    renewed_at = timezone.now()
    agent(_report())  # node's own token reports for node only
    assert _lost(other, renewed_at) == "down"
    assert Node.objects.get(pk=node.pk).state == NodeState.READY


def test_the_lease_clock_counts_from_the_renewal_seen_not_from_the_same_lease_seen_again():
    now = [100.0]
    clock = LeaseClock(20, clock=lambda: now[0])
    clock.observe(LeaseSeen("a", "t1"))
    clock.observe(LeaseSeen("b", "t1"))
    now[0] = 115.0
    clock.observe(LeaseSeen("a", "t1"))  # the same renewal (a relist): not a new one
    clock.observe(LeaseSeen("b", "t2"))
    now[0] = 120.0
    assert [(node, silent) for node, silent, _at in clock.overdue()] == [("a", 20.0)]
    clock.observe(LeaseSeen("a", "t3"))
    assert clock.overdue() == []
