"""The console's cluster pages: the list, the order form (whole-node offerings only, placing
the cluster on the emulator's fleet once per form, refusals shown in the form), a cluster's
page with its ranks, and its stop / start / terminate buttons; in English and Chinese."""

import re

import pytest
from django.template.loader import render_to_string

from clusters.models import Cluster
from clusters.preflight import preflight_run
from clusters.selectors import cluster_view
from clusters.services import cluster_order
from clusters.views import detail_context
from fleet.models import Region
from instances.lifecycle import instance_order
from instances.models import Instance
from instances.provisioning import converge
from starverse.core.errors import InsufficientBalance
from tests.factories import (
    converge_until,
    fund,
    make_cluster,
    make_operator,
    make_ssh_key,
    make_user,
    staff_login,
)

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-CN,zh;q=0.9"}


def _token(page) -> str:
    match = re.search(r'name="token" value="([^"]+)"', page.content.decode())
    assert match, "the order form has no token"
    return match.group(1)


def _order(client, catalog, token=None, headers=None, **extra):
    token = token or _token(client.get("/console/clusters/new/"))
    data = {
        "offering": catalog["h100_node"].id,
        "node_count": "2",
        "image": catalog["image"].id,
        "template": "deepspeed",
        "billing": "hourly",
        "name": "pretrain",
        "token": token,
        **extra,
    }
    return client.post("/console/clusters/new/", data, **(headers or {}))


def _orderer(client, fen=10_000_000):
    user = make_user()
    fund(user, fen)
    client.force_login(user)
    return user


@pytest.mark.parametrize("headers", [{}, ZH], ids=["en", "zh-hans"])
def test_empty_list_offers_to_order_and_the_navigation_leads_there(client, user, headers):
    client.force_login(user)

    page = client.get("/console/clusters/", **headers)

    html = page.content.decode()
    assert page.status_code == 200
    assert 'href="/console/clusters/new/"' in html  # the empty state's button
    assert 'href="/console/clusters/"' in html and 'aria-current="page"' in html  # the menu
    assert html.index('href="/console/instances/"') < html.index('href="/console/clusters/"')
    assert 'lang="zh-hans"' in html if headers else 'lang="en"' in html
    assert "{{" not in html


@pytest.mark.parametrize("headers", [{}, ZH], ids=["en", "zh-hans"])
def test_order_form_offers_whole_nodes_only_with_the_price_of_all_nodes(catalog, client, headers):
    _orderer(client, fen=100_000)  # ¥1,000: three hours of two ¥160 nodes

    page = client.get("/console/clusters/new/", **headers)

    html = page.content.decode()
    assert page.status_code == 200
    assert f'value="{catalog["h100_node"].id}"' in html
    assert f'value="{catalog["a100_node"].id}"' in html
    assert f'value="{catalog["h100x1"].id}"' not in html  # a cloud GPU is not a whole node
    assert f'value="{catalog["h100x8"].id}"' not in html
    for template in ("torchrun", "deepspeed", "megatron", "colossalai", "none"):
        assert f'name="template" value="{template}"' in html
    assert 'name="node_count"' in html and 'max="128"' in html
    assert "¥320.00" in html  # an hour of both nodes, in the summary
    assert _token(page)
    if not headers:
        assert "2 nodes free" in html
        assert "covers about 3 hours of this cluster" in html


@pytest.mark.parametrize("headers", [{}, ZH], ids=["en", "zh-hans"])
def test_ordering_through_the_form_places_the_cluster_on_the_fleet_once(catalog, client, headers):
    user = _orderer(client)
    make_ssh_key(user)
    token = _token(client.get("/console/clusters/new/"))

    first = _order(client, catalog, token=token, headers=headers)
    second = _order(client, catalog, token=token, headers=headers)

    cluster = Cluster.objects.get(tenant=user.tenant)
    assert first.status_code == second.status_code == 302
    assert first["Location"] == second["Location"] == f"/console/clusters/{cluster.id}/"
    assert (cluster.name, cluster.node_count, cluster.template) == ("pretrain", 2, "deepspeed")
    ranks = list(
        Instance.objects.filter(cluster_rank__cluster=cluster)
        .select_related("node")
        .order_by("cluster_rank__index")
    )
    assert [r.status for r in ranks] == ["provisioning", "provisioning"]
    assert sorted(r.node.name for r in ranks if r.node) == ["gpu-h100-0", "gpu-h100-1"]
    assert cluster.idempotency_key == "console:" + token

    page = client.get(f"/console/clusters/{cluster.id}/", **headers)
    html = page.content.decode()
    assert page.status_code == 200
    assert "gpu-h100-0" in html and "gpu-h100-1" in html and "h100-leaf-0" in html
    assert 'data-field="switches">1<' in html
    assert html.count('class="chart" data-metric="util" data-rank="') == 2  # one per rank
    assert f'href="/console/instances/{ranks[0].id}/"' in html
    assert "{{" not in html
    listing = client.get("/console/clusters/", **headers).content.decode()
    assert f'data-cluster="{cluster.id}"' in listing
    assert "inst-status-provisioning" in listing


def test_bad_input_is_shown_in_the_form_with_the_choices_kept(catalog, client, settings):
    _orderer(client)
    token = _token(client.get("/console/clusters/new/"))

    one = _order(client, catalog, token=token, node_count="1")
    assert one.status_code == 400
    assert "at least 2 nodes" in one.content.decode()
    assert re.search(rf'value="{catalog["h100_node"].id}"\s+checked', one.content.decode())
    assert 'value="pretrain"' in one.content.decode()
    assert _token(one) == token

    cloud = _order(client, catalog, token=token, offering=catalog["h100x8"].id)
    assert cloud.status_code == 400
    assert "not available for clusters" in cloud.content.decode()

    settings.CLUSTER_MAX_NODES = 4
    many = _order(client, catalog, token=token, node_count="5")
    assert many.status_code == 400
    assert "2 to 4 nodes" in many.content.decode()
    too_many = _order(client, catalog, token=token, node_count="3")  # the fleet has 2
    assert too_many.status_code == 400
    assert "Choose at most 2 nodes" in too_many.content.decode()
    assert not Cluster.objects.exists() and not Instance.objects.exists()


def test_the_form_takes_the_planners_sizes_and_orders_with_them(catalog, client):
    _orderer(client)
    node = catalog["h100_node"].id

    # the planner's link fills the form
    page = client.get(
        f"/console/clusters/new/?offering={node}&node_count=2&tensor_parallel=4&pipeline_parallel=2"
    ).content.decode()
    assert re.search(rf'value="{node}"\s+checked', page)
    assert 'name="node_count" min="2" max="128" step="1" value="2"' in page
    assert 'name="tensor_parallel" min="1" step="1" value="4"' in page
    assert 'name="pipeline_parallel" min="1" step="1" value="2"' in page
    assert "Tensor parallel size (TP)" in page and "Pipeline parallel size (PP)" in page

    ordered = _order(client, catalog, tensor_parallel="4", pipeline_parallel="2")

    cluster = Cluster.objects.get()
    assert ordered.status_code == 302
    assert (cluster.tensor_parallel, cluster.pipeline_parallel) == (4, 2)


def test_the_form_refuses_sizes_as_the_api_does(catalog, client):
    _orderer(client)
    token = _token(client.get("/console/clusters/new/"))

    odd = _order(client, catalog, token=token, tensor_parallel="3")
    assert odd.status_code == 400
    assert (
        "Tensor parallelism 3 does not divide the 8 GPUs of a node: choose a divisor of 8."
        in odd.content.decode()
    )
    assert 'name="tensor_parallel" min="1" step="1" value="3"' in odd.content.decode()
    product = _order(client, catalog, token=token, tensor_parallel="8", pipeline_parallel="3")
    assert product.status_code == 400
    assert (
        "Tensor × pipeline parallelism (24) does not divide the cluster&#39;s 16 GPUs"
        in product.content.decode()
    )
    alone = _order(client, catalog, token=token, pipeline_parallel="2")
    assert alone.status_code == 400
    assert "Enter the tensor parallel size with the pipeline parallel size." in (
        alone.content.decode()
    )
    zero = _order(client, catalog, token=token, tensor_parallel="0", headers=ZH)
    assert zero.status_code == 400
    assert "张量并行度至少为 1。" in zero.content.decode()
    assert not Cluster.objects.exists() and not Instance.objects.exists()


def test_limits_are_shown_in_the_form(catalog, client, settings):
    _orderer(client)
    settings.MAX_RUNNING_GPUS = 8

    page = _order(client, catalog)

    assert page.status_code == 409
    assert 'class="alert alert-error' in page.content.decode()
    assert not Cluster.objects.exists()


def test_too_little_balance_says_this_cluster_and_keeps_the_form(catalog, client):
    client.force_login(make_user())  # ¥10 of trial credit; two nodes cost ¥320 an hour
    token = _token(client.get("/console/clusters/new/"))

    page = _order(client, catalog, token=token)

    html = page.content.decode()
    assert page.status_code == 402
    assert "does not cover ¥320.00 (one hour of this cluster)" in html
    assert "this instance" not in html
    assert 'href="/billing/#top-up"' in html
    assert _token(page) == token
    assert not Cluster.objects.exists()


def test_the_runway_refusal_of_a_cluster_names_the_cluster(catalog):
    nodes = {"offering_id": catalog["h100_node"].id, "image_id": "pytorch-2.1", "node_count": 2}
    with pytest.raises(InsufficientBalance) as refused:
        cluster_order(user=make_user(), **nodes)  # ¥10 of trial credit for ¥320 an hour
    assert "does not cover ¥320.00 (one hour of this cluster)" in refused.value.message
    assert "instance" not in refused.value.message

    burning = make_user()
    fund(burning, 4_000)  # ¥50: a ¥22 GPU runs; two ¥160 nodes more do not fit (they queue)
    instance_order(user=burning, offering_id=catalog["h100x1"].id, image_id="pytorch-2.1")
    with pytest.raises(InsufficientBalance) as short:
        cluster_order(user=burning, **nodes)
    assert "one hour of this cluster (¥320.00) plus one hour of what your running" in (
        short.value.message
    )
    assert not Cluster.objects.exists()


def test_queued_cluster_page_shows_its_place_in_line(catalog, client):
    make_cluster(make_user())  # both H100 nodes taken
    user = _orderer(client)
    queued = make_cluster(user)

    html = client.get(f"/console/clusters/{queued.id}/").content.decode()

    assert 'data-field="queue">1</span>' in html
    # the launch command is known before any rank is placed (stable rank host names)
    assert "/etc/starverse/launch/" in html and "Not run yet" in html
    listing = client.get("/console/clusters/").content.decode()
    assert "#1 in line" in listing


def test_another_tenants_cluster_is_not_found(catalog, client):
    cluster = make_cluster(make_user())
    client.force_login(make_user())

    assert client.get(f"/console/clusters/{cluster.id}/").status_code == 404
    for action in ("stop", "start", "terminate"):
        assert client.post(f"/console/clusters/{cluster.id}/{action}/").status_code == 404
    assert cluster.id not in client.get("/console/clusters/").content.decode()
    assert set(
        Instance.objects.filter(cluster_rank__cluster=cluster).values_list("status", flat=True)
    ) == {"provisioning"}


def test_actions_are_post_only(catalog, client):
    cluster = make_cluster(_orderer(client))

    for action in ("stop", "start", "terminate"):
        assert client.get(f"/console/clusters/{cluster.id}/{action}/").status_code == 405


def test_stop_start_terminate_buttons_move_every_rank(catalog, client):
    user = _orderer(client)
    cluster = make_cluster(user)
    ranks = list(
        Instance.objects.filter(cluster_rank__cluster=cluster).order_by("cluster_rank__index")
    )
    for rank in ranks:
        assert converge_until(converge.provision, rank.id) == "checking"
    assert preflight_run(cluster.id) == "passed"

    page = client.get(f"/console/clusters/{cluster.id}/").content.decode()
    assert "inst-status-running" in page
    for action in ("stop", "terminate"):
        assert f'action="/console/clusters/{cluster.id}/{action}/"' in page
    assert re.search(r'action="/console/clusters/[^"]+/terminate/" data-confirm="', page)
    assert re.search(r'action="/console/clusters/[^"]+/start/" data-action="start" hidden', page)
    assert 'name="csrfmiddlewaretoken"' in page

    stopped = client.post(f"/console/clusters/{cluster.id}/stop/", follow=True)
    assert stopped.redirect_chain[-1][0] == f"/console/clusters/{cluster.id}/"
    assert "billing has stopped for every node" in stopped.content.decode()
    for rank in ranks:
        assert converge_until(converge.stop, rank.id) == "stopped"
    again = client.post(f"/console/clusters/{cluster.id}/stop/", follow=True)
    assert "Only a running or starting cluster can be stopped." in again.content.decode()

    back = "/console/clusters/"
    started = client.post(f"/console/clusters/{cluster.id}/start/", {"next": back})
    assert started["Location"] == back
    assert set(
        Instance.objects.filter(cluster_rank__cluster=cluster).values_list("status", flat=True)
    ) == {"provisioning"}

    elsewhere = client.post(
        f"/console/clusters/{cluster.id}/terminate/", {"next": "https://evil.example/"}
    )
    assert elsewhere["Location"] == f"/console/clusters/{cluster.id}/"
    assert set(
        Instance.objects.filter(cluster_rank__cluster=cluster).values_list("status", flat=True)
    ) == {"terminating"}
    for rank in ranks:
        assert converge_until(converge.terminate, rank.id) == "terminated"
    page = client.get(f"/console/clusters/{cluster.id}/").content.decode()
    assert "A terminated cluster has no actions left." in page


def test_detail_shows_whatever_launch_commands_and_preflight_the_cluster_has(catalog, rf):
    """The page renders the API's `launch` {name: command} and `preflight` as they come (other
    parts of the platform fill them): one copy button per command, the bandwidth against its floor, each node pair (the slow
    one marked) and the slow node."""
    user = make_user()
    cluster = make_cluster(user)
    context = detail_context(cluster, cluster_view(cluster))
    context["info"] = {
        **context["info"],
        "launch": {
            "deepspeed": "deepspeed --hostfile /etc/starverse/hostfile train.py",
            "torchrun": "torchrun --nnodes 2 --nproc-per-node 8 train.py",
        },
        "preflight": {
            "status": "failed",
            "round": 2,
            "busbw_gbps": 120.0,
            "floor_gbps": 150,
            "pairs": [
                {"round": 1, "ranks": [0, 1], "busbw_gbps": 182.46},
                {"round": 1, "ranks": [2, 3], "busbw_gbps": 22.2},
            ],
            "bad_nodes": [{"rank": 3, "node": "gpu-a100-3"}],
            "finished_at": "2026-12-01T12:44:57.485251+08:00",
        },
    }
    request = rf.get(f"/console/clusters/{cluster.id}/")
    request.user = user

    html = render_to_string("clusters/detail.html", context, request=request)

    assert "deepspeed --hostfile /etc/starverse/hostfile train.py" in html
    assert html.count('data-copy="#launch-') == 2
    assert "No launch command" not in html
    assert "120.0 GB/s" in html and "150.0 GB/s" in html and "Failed" in html
    assert "2026-12-01 12:44:57" in html and "Rank 3 on gpu-a100-3" in html
    # each node pair measured, the one under the floor marked
    assert "182.5 GB/s" in html and '<tr class="is-slow"><td>Rank 2 ↔ Rank 3</td>' in html
    assert "Not run yet" not in html
    # where its ranks run: the region's name, whichever region that is
    region = Region.objects.create(name="cn-east-2", display_name="East China 2")
    Instance.objects.filter(cluster_rank__cluster=cluster).update(region=region)
    context = detail_context(cluster, cluster_view(Cluster.objects.get(pk=cluster.pk)))
    html = render_to_string("clusters/detail.html", context, request=request)
    assert '<dd data-field="region">East China 2</dd>' in html


def test_the_admin_lists_a_clusters_ranks_with_links_to_their_instances(catalog, client):
    cluster = make_cluster(make_user())
    staff_login(client, make_operator())

    html = client.get(f"/admin/clusters/cluster/{cluster.id}/change/").content.decode()

    for rank in cluster.ranks.all():
        assert f'href="/admin/instances/instance/{rank.instance_id}/change/"' in html
    assert cluster.ranks.count() == 2


def test_ranks_are_listed_under_their_cluster_and_their_pages_send_there(catalog, client):
    """A rank is not in the Instances list with buttons of its own (they would be refused: a
    cluster acts as a whole); its page says whose rank it is and links to the cluster."""
    user = _orderer(client)
    cluster = make_cluster(user, name="llama-ft")
    alone = instance_order(
        user=user, offering_id=catalog["h100x1"].id, image_id="pytorch-2.1", name="solo"
    )[0]
    ranks = list(
        Instance.objects.filter(cluster_rank__cluster=cluster).order_by("cluster_rank__index")
    )

    listing = client.get("/console/instances/").content.decode()
    page = client.get(f"/console/instances/{ranks[1].id}/").content.decode()
    zh = client.get(f"/console/instances/{ranks[1].id}/", **ZH).content.decode()

    assert alone.id in listing and not any(rank.id in listing for rank in ranks)
    assert "This instance is rank 1 of the cluster llama-ft" in page
    assert f'href="/console/clusters/{cluster.id}/"' in page
    assert f'action="/console/instances/{ranks[1].id}/stop/"' not in page
    assert f'action="/console/instances/{ranks[1].id}/terminate/"' not in page
    assert "llama-ft" in zh and "This instance is" not in zh
