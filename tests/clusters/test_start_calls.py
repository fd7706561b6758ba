"""What starting a cluster asks of the Kubernetes API and of the database, rank by rank, so that
a 128-node cluster (or job) comes up in seconds (bench cluster_128_ready): the objects the ranks
share (the headless Service, the key Secret, the files ConfigMap) and the tenant's namespace,
RoleBindings and NetworkPolicies are made sure of once a round, by the first rank, and trusted by
the others (Cluster.objects_fingerprint), so every rank after the first creates its own objects
and nothing more, whatever the cluster's size; a rank of a later round (a restart, a rank placed
again) makes sure of them again, so one deleted meanwhile is made again, and a create that finds
the namespace gone has the next pass make it again; the ranks' host keys are stored by one
UPDATE, so a rank's queries do not grow with its cluster; and the pre-flight round that passes
starts every rank's billing with the same queries whatever the cluster's size. Counted at the
emulator's API server (its request log) and at the database connection."""

import base64
import contextlib
from collections import Counter
from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from clusters import pods
from clusters.models import Cluster
from clusters.preflight import preflight_run
from clusters.ranks import ranks_locked
from devstack.kube.emulator import KubeEmulator
from fleet.services import nodes_sync_from_cluster
from instances.models import Instance
from instances.provisioning import converge
from instances.states import rank_mark_restarting
from starverse.core import kube
from starverse.core.hostkeys import host_key_from_private
from tests.conftest import KUBE_TIMINGS
from tests.factories import converge_until, make_cluster, make_user


@pytest.fixture(scope="module")
def six_node_emulator() -> Iterator[KubeEmulator]:
    emulator = KubeEmulator(fleet={"h100": 6}, **KUBE_TIMINGS).start()
    yield emulator
    emulator.stop()


@pytest.fixture
def fleet6(six_node_emulator, db, settings, tmp_path) -> Iterator[KubeEmulator]:
    six_node_emulator.reset()
    settings.MAX_RUNNING_GPUS = 64
    settings.KUBECONFIG = str(six_node_emulator.write_kubeconfig(tmp_path / "kubeconfig"))
    kube._api_client.cache_clear()
    call_command("seed_catalog", verbosity=0)
    nodes_sync_from_cluster()
    yield six_node_emulator
    kube._api_client.cache_clear()


def _ranks(cluster: Cluster) -> list[str]:
    return list(
        Instance.objects.filter(cluster_rank__cluster=cluster)
        .order_by("cluster_rank__index")
        .values_list("id", flat=True)
    )


def _kind(path: str) -> str:
    """The resource a request is about: /api/v1/namespaces/<ns>/configmaps/<name> → configmaps;
    a namespace itself → namespaces."""
    parts = path.strip("/").split("/")
    if "namespaces" not in parts:
        return parts[-1]
    after = parts[parts.index("namespaces") + 2 :]
    return after[0] if after else "namespaces"


def _first_pass(emulator: KubeEmulator, rank_id: str) -> tuple[Counter, int]:
    """A rank's first provisioning pass, the emulator paused (its pod stays pending, so the pass
    creates the rank's objects, reads its pod and its events once, and asks to be polled
    again): the requests it sent, by (method, kind), and the queries it made."""
    mark = emulator.requests_total
    with (
        emulator.paused(),
        CaptureQueriesContext(connection) as queries,
        pytest.raises(converge.StillPending),
    ):
        converge.provision(rank_id)
    sent = Counter((method, _kind(path)) for method, path in emulator.requests_since(mark))
    return sent, len(queries)


# A rank's own objects: its access Secret, its disk and system disk claims, its pod, its SSH
# Service and the Service and HTTPRoute of the port it serves (Jupyter); then one read of its
# pod and of its events.
OWN = {
    ("POST", "secrets"): 1,
    ("POST", "persistentvolumeclaims"): 2,
    ("POST", "pods"): 1,
    ("POST", "services"): 2,
    ("POST", "httproutes"): 1,
    ("GET", "pods"): 1,
    ("GET", "events"): 1,
}
# What exists already once the first rank has run: the tenant's namespace, its two RoleBindings
# and two NetworkPolicies, and the cluster's headless Service, key Secret and files ConfigMap.
SHARED = ["namespaces", "rolebindings", "networkpolicies", "services", "secrets", "configmaps"]


def test_later_ranks_only_create_their_own_objects_and_all_cost_the_same(fleet6):
    cluster = make_cluster(make_user(), node_count=4)
    (first, _), *later = [_first_pass(fleet6, rank) for rank in _ranks(cluster)]

    # the first rank creates the shared objects, each once
    made = {kind: first[("POST", kind)] for kind in SHARED}
    assert made == {
        "namespaces": 1,
        "rolebindings": 2,
        "networkpolicies": 2,
        "services": 3,  # its own two and the cluster's headless one
        "secrets": 2,  # its access Secret and the cluster's key Secret
        "configmaps": 1,
    }
    # each later rank creates its own objects and reads nothing of the shared ones: 9 calls
    for sent, _queries in later:
        assert sent == Counter(OWN)
    assert len({queries for _sent, queries in later}) == 1
    cluster.refresh_from_db()
    assert len(cluster.objects_fingerprint) == 32 and cluster.objects_ensured_at is not None


def test_a_starts_calls_and_queries_grow_by_one_ranks_own_a_rank(fleet6):
    """Two ranks more cost two later ranks' own calls and queries, nothing else: what the ranks
    share is made sure of once, not once a rank."""
    small, big = make_cluster(make_user(), node_count=2), make_cluster(make_user(), node_count=4)
    two = [_first_pass(fleet6, rank) for rank in _ranks(small)]
    four = [_first_pass(fleet6, rank) for rank in _ranks(big)]

    calls = [sum(sent.values()) for sent, _queries in two + four]
    assert calls[1] == calls[3] == calls[4] == calls[5] == sum(OWN.values()) == 9
    assert sum(calls[2:]) == sum(calls[:2]) + 2 * 9
    assert sum(q for _s, q in four) == sum(q for _s, q in two) + 2 * four[-1][1]


def _pass(emulator: KubeEmulator, rank_id: str) -> Counter:
    """The requests of one provisioning pass of a rank (pending or not)."""
    mark = emulator.requests_total
    with emulator.paused(), contextlib.suppress(converge.StillPending):
        converge.provision(rank_id)
    return Counter((method, _kind(path)) for method, path in emulator.requests_since(mark))


def test_a_later_round_makes_sure_of_the_shared_objects_again(fleet6):
    """Objects deleted while a cluster ran are made again when its ranks provision again (a
    job's restart here): each rank whose provisioning began after the last rank to make sure of
    them did reads them again, the first finds them missing and makes them."""
    cluster = make_cluster(make_user(), node_count=2)
    ranks = _ranks(cluster)
    for rank in ranks:
        assert converge_until(converge.provision, rank) == "checking"
    namespace = Instance.objects.get(pk=ranks[0]).k8s_namespace
    files = f"{cluster.id.lower().replace('_', '-')}-files"
    kube.delete("ConfigMap", namespace, files)
    kube.delete("NetworkPolicy", namespace, "tenant-isolation")
    with transaction.atomic():
        for instance in ranks_locked(cluster.id):
            rank_mark_restarting(instance, "again", now=timezone.now())

    sent = _pass(fleet6, ranks[0])

    assert sent[("POST", "configmaps")] == 1 and sent[("POST", "networkpolicies")] == 1
    assert kube.read("ConfigMap", namespace, files) is not None
    assert kube.read("NetworkPolicy", namespace, "tenant-isolation") is not None
    # the other rank of that round trusts what the first made sure of
    sent = _pass(fleet6, ranks[1])
    only_shared = ("namespaces", "rolebindings", "networkpolicies", "configmaps")
    assert [kind for _method, kind in sent if kind in only_shared] == []


def test_a_namespace_deleted_mid_start_is_made_again(fleet6):
    """A rank that trusts the namespace and finds it gone (its create answered 404) waits a
    pass; the next pass makes sure of the namespace, its policies and the cluster's objects
    again, and goes on."""
    cluster = make_cluster(make_user(), node_count=3)
    first, second, _third = _ranks(cluster)
    _first_pass(fleet6, first)
    namespace = Instance.objects.get(pk=first).k8s_namespace
    kube.core().delete_namespace(namespace)
    for _ in range(50):
        if kube.read("Namespace", None, namespace) is None:
            break
        fleet6.step(1.0)
    assert kube.read("Namespace", None, namespace) is None

    with fleet6.paused(), pytest.raises(converge.StillPending, match="namespace"):
        converge.provision(second)
    cluster.refresh_from_db()
    assert cluster.objects_ensured_at is None

    sent, _queries = _first_pass(fleet6, second)
    assert sent[("POST", "namespaces")] == 1 and sent[("POST", "configmaps")] == 1
    assert kube.read("NetworkPolicy", namespace, "tenant-isolation") is not None


def test_a_ranks_queries_do_not_grow_with_its_cluster(fleet6):
    """The first rank of a 4-node cluster makes the same queries as that of a 2-node one: the
    ranks' host keys were stored with the order, and their rows are read by one query,
    whatever their number."""
    user = make_user()
    small, big = make_cluster(user, node_count=2), make_cluster(user, node_count=4)
    rows = Instance.objects.filter(cluster_rank__cluster=big)
    assert all(row.ssh_host_key and row.ssh_host_key_fingerprint for row in rows)
    keys = {row.pk: row.ssh_host_key for row in rows}
    _sent, two = _first_pass(fleet6, _ranks(small)[0])
    _sent, four = _first_pass(fleet6, _ranks(big)[0])

    assert four == two
    assert {row.pk: row.ssh_host_key for row in rows.all()} == keys  # the order's, kept


def test_ranks_ordered_without_host_keys_get_them_all_at_the_first_pass(fleet6):
    """Ranks that have no host key yet (ordered before ranks came with theirs) get one each
    at their cluster's first pass, by one UPDATE, so that known_hosts lists every rank."""
    cluster = make_cluster(make_user(), node_count=4)
    ranks = Instance.objects.filter(cluster_rank__cluster=cluster)
    ranks.update(ssh_host_key="", ssh_host_key_fingerprint="")
    first = _ranks(cluster)[0]

    _sent, _queries = _first_pass(fleet6, first)

    rows = list(ranks.order_by("cluster_rank__index"))
    assert all(row.ssh_host_key and row.ssh_host_key_fingerprint for row in rows)
    assert len({row.ssh_host_key for row in rows}) == 4
    namespace, dns = rows[0].k8s_namespace, pods.cluster_dns(cluster.id)
    secret = kube.read("Secret", namespace, f"{dns}-ssh")
    assert secret is not None
    known = base64.b64decode(secret["data"]["known_hosts"]).decode().splitlines()
    assert [line.split(" ", 1)[1] for line in known] == [
        host_key_from_private(row.ssh_host_key).public_openssh for row in rows
    ]


def test_a_cluster_started_this_way_comes_up_whole(fleet6):
    """The ranks, past their first pass, come up and the pre-flight passes: nothing the
    later ranks only read was missing."""
    cluster = make_cluster(make_user(), node_count=4)
    ranks = _ranks(cluster)
    for rank in ranks:
        _first_pass(fleet6, rank)
    for rank in ranks:
        assert converge_until(converge.provision, rank) == "checking"
    assert preflight_run(cluster.id) == "passed"


def _passing_round(emulator: KubeEmulator, cluster: Cluster) -> int:
    """The queries of the pre-flight round that passes, every rank of the cluster up."""
    for rank in _ranks(cluster):
        _first_pass(emulator, rank)
        assert converge_until(converge.provision, rank) == "checking"
    with CaptureQueriesContext(connection) as queries:
        assert preflight_run(cluster.id) == "passed"
    return len(queries)


def test_the_passing_rounds_queries_do_not_grow_with_the_cluster(fleet6):
    """Every rank's billing starts together (one UPDATE, one insert of the events, one query
    opening the sessions): a 4-node cluster's passing round makes the queries a 2-node one's
    does, where rank by rank it made seven more a rank."""
    user = make_user()
    small, big = make_cluster(user, node_count=2), make_cluster(user, node_count=4)
    two = _passing_round(fleet6, small)
    four = _passing_round(fleet6, big)

    assert four == two
    for row in Instance.objects.filter(cluster_rank__cluster=big).select_related("holding"):
        assert row.status == "running" and row.session == 1 and row.running_since is not None
        assert row.holding.meter_key == f"usage:{row.id}:1"
        assert row.holding.metered_since == row.running_since
