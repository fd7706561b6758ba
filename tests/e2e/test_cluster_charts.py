"""A stopped cluster's page charts the samples its ranks took before it stopped (the hour up to
the stop), not "No samples yet"; samples its nodes took after it let them go are the next
renter's and are not shown. In both languages."""

from datetime import timedelta

from django.utils import timezone
from playwright.sync_api import Page, expect

from clusters.preflight import preflight_run
from clusters.services import cluster_stop
from fleet.models import Gpu, GpuSample
from instances.models import Instance, InstanceEvent
from instances.provisioning import converge
from tests.e2e.steps import log_in, t
from tests.factories import converge_until, fund, make_cluster, make_user


def test_a_stopped_cluster_charts_its_last_samples(page: Page, lang, live_server, catalog):
    user = make_user()
    fund(user, 10_000_000)
    cluster = make_cluster(user)
    ranks = list(
        Instance.objects.filter(cluster_rank__cluster=cluster).order_by("cluster_rank__index")
    )
    # (tasks run after commit here: the pre-flight check may have passed already)
    states = {converge_until(converge.provision, rank.id) for rank in ranks}
    if "checking" in states:
        assert preflight_run(cluster.id) == "passed"
    assert {rank.status for rank in Instance.objects.filter(pk__in=[r.pk for r in ranks])} == {
        "running"
    }
    # The cluster has run for ten minutes: its samples lie inside its run, not racing its start.
    now = timezone.now()
    InstanceEvent.objects.filter(instance__in=ranks).update(at=now - timedelta(minutes=10))
    gpus = {}
    for rank in ranks:
        gpu, _created = Gpu.objects.get_or_create(
            node_id=rank.node_id, index=0, defaults={"uuid": f"GPU-{rank.node_id}", "product": "x"}
        )
        gpus[rank.pk] = gpu
        GpuSample.objects.create(gpu=gpu, at=now - timedelta(seconds=2), util=80)
        GpuSample.objects.create(gpu=gpu, at=now - timedelta(seconds=1), util=90)
    cluster_stop(cluster=cluster)
    for rank in ranks:
        assert converge_until(converge.stop, rank.id) == "stopped"
    for gpu in gpus.values():  # the node's next renter
        GpuSample.objects.create(gpu=gpu, at=timezone.now() + timedelta(seconds=1), util=5)
    log_in(page, live_server.url, user.email)

    page.goto(f"{live_server.url}/console/clusters/{cluster.id}/")

    charts = page.locator("#charts .chart")
    expect(charts).to_have_count(2)
    expect(charts.locator("svg")).to_have_count(2)
    expect(page.locator("#charts")).not_to_contain_text(t(lang, "No samples yet"))
    expect(page.locator(".inst-metrics .card-header .muted")).to_have_text(
        t(lang, "The last hour before it stopped")
    )
    for index in range(2):
        legend = charts.nth(index).locator(".chart-legend li")
        expect(legend.first).to_contain_text("90 %")
