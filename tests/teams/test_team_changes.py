"""Teams, the rest: role checks on disks, the NAS, ports and share links (API and console), and
the audit log's entries for them."""

import re

import pytest
from django.test import Client

from instances.models import Instance
from starverse.accounts.models import AuditEvent
from storage.models import Disk, SharedStorage
from storage.nas import nas_set_size
from tests.factories import make_disk, make_instance, make_user
from tests.teams.test_teams import bearer, fund_team, join


@pytest.fixture
def lab(db):
    """A funded team: its owner, an admin and two members."""
    from billing.onboarding import team_create

    owner, admin, ana, bo = (make_user() for _ in range(4))
    team = team_create(user=owner, name="Vision lab")
    join(team, owner, admin, role="admin")
    join(team, owner, ana)
    join(team, owner, bo)
    fund_team(team, 10_000_000)
    return team, owner, admin, ana, bo


def acting(user, team, role):
    user.act_for(team.pk, role)
    return user


def console(client, user, team):
    client.force_login(user)
    client.post("/teams/switch/", {"team": team.pk})
    return client


def actions(team, **filters):
    return list(
        AuditEvent.objects.filter(tenant=team, **filters)
        .order_by("at", "id")
        .values_list("action", flat=True)
    )


def test_a_member_attaches_and_detaches_only_their_own_disks(lab):
    team, _owner, admin, ana, bo = lab
    instance = make_instance(acting(ana, team, "member"))
    theirs = make_disk(acting(bo, team, "member"), "bos")
    api = bearer(ana, team=team)

    refused = api.post(f"/api/v1/instances/{instance.pk}/disks", {"disk": theirs.pk}, format="json")

    assert (refused.status_code, refused.json()["code"]) == (403, "not_yours")
    assert Disk.objects.get(pk=theirs.pk).instance_id is None
    done = bearer(admin, team=team).post(
        f"/api/v1/instances/{instance.pk}/disks", {"disk": theirs.pk}, format="json"
    )
    assert done.status_code == 202
    refused = api.delete(f"/api/v1/instances/{instance.pk}/disks/{theirs.pk}")
    assert (refused.status_code, refused.json()["code"]) == (403, "not_yours")
    assert Disk.objects.get(pk=theirs.pk).instance_id == instance.pk
    assert bearer(bo, team=team).delete(
        f"/api/v1/instances/{instance.pk}/disks/{theirs.pk}"
    ).status_code == (403)  # bo's disk, but ana's instance
    mine = make_disk(ana, "anas")
    assert (
        api.post(
            f"/api/v1/instances/{instance.pk}/disks", {"disk": mine.pk}, format="json"
        ).status_code
        == 202
    )
    assert api.delete(f"/api/v1/instances/{instance.pk}/disks/{mine.pk}").status_code == 202
    assert actions(team, action__startswith="disk.") == [
        "disk.attached",
        "disk.attached",
        "disk.detached",
    ]
    attached = AuditEvent.objects.filter(tenant=team, action="disk.attached").earliest("at")
    assert (attached.actor_id, attached.object_id, attached.data) == (
        admin.pk,
        theirs.pk,
        {"instance": instance.pk},
    )


def test_a_member_orders_only_with_their_own_disks(lab, catalog):
    team, _owner, _admin, ana, bo = lab
    theirs = make_disk(acting(bo, team, "member"), "bos")
    refused = bearer(ana, team=team).post(
        "/api/v1/instances",
        {"offering": catalog["h100x1"].id, "image": catalog["image"].id, "disks": [theirs.pk]},
        format="json",
    )
    assert (refused.status_code, refused.json()["code"]) == (403, "not_yours")
    assert not Instance.objects.filter(tenant=team).exists()


def test_console_attach_of_anothers_disk_is_refused(lab, client):
    team, _owner, _admin, ana, bo = lab
    instance = make_instance(acting(ana, team, "member"))
    theirs = make_disk(acting(bo, team, "member"), "bos")
    console(client, ana, team)

    answer = client.post(
        f"/console/instances/{instance.pk}/disks/", {"disk": theirs.pk}, follow=True
    )

    assert "ordered by another member" in answer.content.decode()
    assert Disk.objects.get(pk=theirs.pk).instance_id is None
    assert not actions(team, action="disk.attached")


def test_disk_changes_are_audited_api_and_console(lab, client):
    team, _owner, _admin, ana, _bo = lab
    api = bearer(ana, team=team)
    made = api.post("/api/v1/disks", {"name": "ckpt", "size_gb": 10}, format="json")
    assert made.status_code == 201
    disk = made.json()["id"]
    assert api.patch(f"/api/v1/disks/{disk}", {"size_gb": 20}, format="json").status_code == 200
    assert api.delete(f"/api/v1/disks/{disk}").status_code == 202
    console(client, ana, team)
    client.post("/console/disks/new/", {"name": "data", "size_gb": 10})
    other = Disk.objects.get(tenant=team, name="data")
    client.post(f"/console/disks/{other.pk}/resize/", {"size_gb": 30})
    client.post(f"/console/disks/{other.pk}/delete/")

    assert actions(team, actor=ana, action__startswith="disk.") == [
        "disk.created",
        "disk.resized",
        "disk.deleted",
        "disk.created",
        "disk.resized",
        "disk.deleted",
    ]
    resized = AuditEvent.objects.filter(tenant=team, action="disk.resized").latest("at")
    assert (resized.object_id, resized.data) == (other.pk, {"size_gb": 30})


def test_a_member_cannot_change_anothers_disk_in_the_console(lab, client):
    team, _owner, _admin, ana, bo = lab
    theirs = make_disk(acting(bo, team, "member"), "bos")
    console(client, ana, team)

    resized = client.post(f"/console/disks/{theirs.pk}/resize/", {"size_gb": 300}, follow=True)
    client.post(f"/console/disks/{theirs.pk}/delete/")

    assert "ordered by another member" in resized.content.decode()
    assert Disk.objects.filter(pk=theirs.pk).values_list("size_gb", "status").get() == (
        100,
        "creating",
    )


def test_the_nas_is_created_by_a_member_and_changed_by_managers(lab, client):
    team, _owner, admin, ana, _bo = lab
    api = bearer(ana, team=team)
    assert api.put("/api/v1/nas", {"size_gb": 10}, format="json").status_code == 201

    refused = api.put("/api/v1/nas", {"size_gb": 20}, format="json")
    assert (refused.status_code, refused.json()["code"]) == (403, "role_forbidden")
    refused = api.delete("/api/v1/nas")
    assert (refused.status_code, refused.json()["code"]) == (403, "role_forbidden")
    console(client, ana, team)
    client.post("/console/nas/", {"size_gb": 30})
    answer = client.post("/console/nas/delete/", follow=True)
    assert "does not allow managing the team" in answer.content.decode()
    nas = SharedStorage.objects.get(tenant=team)
    assert (nas.size_gb, nas.status) == (10, "creating")

    assert (
        bearer(admin, team=team).put("/api/v1/nas", {"size_gb": 20}, format="json").status_code
        == 200
    )
    console(client, admin, team)
    client.post("/console/nas/", {"size_gb": 40})
    assert client.post("/console/nas/delete/").status_code == 302
    assert SharedStorage.objects.get(pk=nas.pk).status == "deleting"
    assert actions(team, action__startswith="nas.") == [
        "nas.created",
        "nas.resized",
        "nas.resized",
        "nas.deleted",
    ]
    assert actions(team, action__startswith="nas.", actor=admin) == [
        "nas.resized",
        "nas.resized",
        "nas.deleted",
    ]


def test_a_personal_account_changes_its_nas(user):
    _nas, created = nas_set_size(user=user, size_gb=10)
    assert created
    assert nas_set_size(user=user, size_gb=20)[0].size_gb == 20


def test_ports_and_shares_only_by_the_orderer_or_a_manager_and_audited(lab, client):
    team, _owner, admin, ana, bo = lab
    instance = make_instance(acting(ana, team, "member"))
    console(client, bo, team)

    answer = client.post(f"/console/instances/{instance.pk}/ports/", {"port": 6006}, follow=True)
    assert "ordered by another member" in answer.content.decode()
    client.post(f"/console/instances/{instance.pk}/shares/", {"port": 8888})
    assert Instance.objects.get(pk=instance.pk).ports == []
    assert not instance.shares.exists()

    console(client, ana, team)
    client.post(f"/console/instances/{instance.pk}/ports/", {"port": 6006})
    client.post(f"/console/instances/{instance.pk}/shares/", {"port": 6006})
    share = instance.shares.get()
    console(client, bo, team)
    client.post(f"/console/instances/{instance.pk}/shares/{share.pk}/revoke/")
    client.post(f"/console/instances/{instance.pk}/ports/6006/remove/")
    share.refresh_from_db()
    assert share.revoked_at is None
    assert Instance.objects.get(pk=instance.pk).ports == [6006]

    api = bearer(admin, team=team)
    assert api.delete(f"/api/v1/instances/{instance.pk}/shares/{share.pk}").status_code == 204
    put = api.put(f"/api/v1/instances/{instance.pk}/ports", {"ports": []}, format="json")
    assert put.status_code == 200
    assert actions(
        team, action__in=["instance.ports_changed", "share.created", "share.revoked"]
    ) == [
        "instance.ports_changed",
        "share.created",
        "share.revoked",
        "instance.ports_changed",
    ]
    first, _made, revoked, last = AuditEvent.objects.filter(
        tenant=team, action__in=["instance.ports_changed", "share.created", "share.revoked"]
    ).order_by("at", "id")
    assert (first.actor_id, first.data) == (ana.pk, {"ports": [6006]})
    assert (revoked.actor_id, revoked.object_id) == (admin.pk, share.pk)
    assert (last.actor_id, last.data) == (admin.pk, {"ports": []})


def test_console_stop_and_start_are_audited(lab, client, catalog):
    team, _owner, _admin, ana, _bo = lab
    instance = make_instance(acting(ana, team, "member"))
    console(client, ana, team)
    client.post(f"/console/instances/{instance.pk}/terminate/")
    assert actions(team, object_id=instance.pk) == ["instance.terminated"]


def test_console_audit_page_filters_by_actor_action_and_days(lab, client):
    team, owner, admin, ana, _bo = lab
    AuditEvent.objects.filter(tenant=team).update(at="2026-11-02T10:00:00+08:00")
    api = bearer(ana, team=team)
    made = api.post("/api/v1/disks", {"name": "ckpt", "size_gb": 10}, format="json").json()["id"]
    bearer(admin, team=team).delete(f"/api/v1/disks/{made}")
    AuditEvent.objects.filter(tenant=team, action="disk.deleted").update(
        at="2026-11-20T10:00:00+08:00"
    )
    AuditEvent.objects.filter(tenant=team, action="disk.created").update(
        at="2026-11-10T10:00:00+08:00"
    )
    client.force_login(owner)
    page = f"/teams/{team.pk}/audit/"

    def shown(**query):
        answer = client.get(page, query)
        assert answer.status_code == 200
        rows = answer.content.decode().split("<tbody>")[1]
        return " ".join(re.findall(r'<tr data-action="([^"]+)">', rows))

    everything = shown()
    assert "disk.created" in everything and "disk.deleted" in everything
    by_ana = shown(actor=ana.pk)
    assert "disk.created" in by_ana and "disk.deleted" not in by_ana
    deletions = shown(action="disk.deleted")
    assert "disk.deleted" in deletions and "disk.created" not in deletions
    middle = shown(since="2026-11-10", until="2026-11-10")  # both days included
    assert "disk.created" in middle and "disk.deleted" not in middle
    assert "team.created" not in middle
    csv_rows = client.get(page, {"action": "disk.deleted", "format": "csv"}).content.decode()
    assert csv_rows.count("\n") == 2 and "disk.deleted" in csv_rows
    link = f'href="/teams/{team.pk}/audit/?action=disk.deleted&amp;format=csv"'
    assert link in client.get(page, {"action": "disk.deleted"}).content.decode()
    refused = client.get(page, {"since": "yesterday"}, follow=True)
    assert "Enter a valid date." in refused.content.decode()


RTX = "NVIDIA GeForce RTX 4090"


def _rtx(user, name="2× RTX 4090 24GB"):
    from compute.models import Offering
    from instances.lifecycle import instance_order

    offering = Offering.objects.get(name=name)
    return instance_order(user=user, offering_id=offering.id, image_id="pytorch-2.1")[0]


def test_a_queued_order_its_budget_no_longer_fits_stays_unstarted(lab, catalog):
    from instances.lifecycle import instance_terminate, queue_drain
    from instances.provisioning import converge
    from starverse.accounts.models import Budget
    from tests.factories import converge_until, fund

    team, _owner, _admin, ana, bo = lab
    other = make_user()
    fund(other, 100_000)
    full = _rtx(other, "8× RTX 4090 24GB")
    waiting = _rtx(acting(ana, team, "member"))
    behind = _rtx(acting(bo, team, "member"))
    assert (waiting.status, behind.status) == ("queued", "queued")
    Budget.objects.create(tenant=team, user=ana, monthly_fen=100)  # set while it waited
    instance_terminate(instance_id=full.id)
    assert converge_until(converge.terminate, full.id) == "terminated"

    assert queue_drain(product=RTX) == [behind.pk]  # passed over, not holding up bo's
    assert queue_drain(product=RTX) == []

    waiting.refresh_from_db()
    assert (waiting.status, waiting.node_id, waiting.cost_fen) == ("queued", None, 0)
    said = [e.text for e in waiting.events.all() if e.text.startswith("Not started")]
    assert said == [
        "Not started: the monthly budget of whoever ordered it in team Vision lab is ¥1.00 and "
        "¥0.00 is spent; this order needs ¥4.40 over its runway. It waits in the queue, "
        "uncharged, until an owner raises the budget or a new month begins."
    ]
    Budget.objects.filter(tenant=team, user=ana).update(monthly_fen=1_000)
    assert queue_drain(product=RTX) == [waiting.pk]


def test_a_budget_stop_of_a_rank_stops_the_whole_cluster(
    lab, catalog, django_capture_on_commit_callbacks
):
    from clusters.preflight import preflight_run
    from instances.metering import budgets_enforce
    from instances.provisioning import converge
    from starverse.accounts.models import Budget
    from tests.factories import converge_until, make_cluster

    team, _owner, _admin, ana, _bo = lab
    cluster = make_cluster(acting(ana, team, "member"))
    ranks = list(
        Instance.objects.filter(cluster_rank__cluster=cluster).order_by("cluster_rank__index")
    )
    for rank in ranks:
        assert converge_until(converge.provision, rank.id) == "checking"
    assert preflight_run(cluster.id) == "passed"
    Instance.objects.filter(pk=ranks[1].pk).update(status="checking")  # say, checked again
    Budget.objects.create(tenant=team, user=ana, monthly_fen=0)

    with django_capture_on_commit_callbacks(execute=True):
        stopped = budgets_enforce()

    assert stopped == [ranks[0].pk]
    # every rank leaves (its pod's removal may still be under way on a busy cluster)
    assert {r.status for r in Instance.objects.filter(cluster_rank__cluster=cluster)} <= {
        "stopping",
        "stopped",
    }
    said = [e.text for e in Instance.objects.get(pk=ranks[1].pk).events.all()]
    assert "Budget spent: stopped (not deleted); disks kept." in said


def test_idle_mail_reaches_the_orderer_and_the_teams_managers(
    lab, catalog, django_capture_on_commit_callbacks
):
    from django.core import mail
    from django.utils import timezone

    from instances.autostop import idle_run
    from tests.instances.test_autostop import report, running, since_running

    team, owner, admin, ana, bo = lab
    payer = make_user()
    join(team, owner, payer, role="billing")
    instance = running(acting(ana, team, "member"))
    report(instance, start=since_running(instance, 40), end=timezone.now(), util=0)

    with django_capture_on_commit_callbacks(execute=True):
        assert idle_run().warned == [instance.pk]

    # the team's notices reach its managers (they can press Keep running) and the member who
    # ordered it; not another member, and not a billing member (refused Keep running)
    (warning,) = mail.outbox
    assert sorted(warning.to) == sorted([owner.email, admin.email, ana.email])
    assert bo.email not in warning.to and payer.email not in warning.to


def test_console_orders_are_audited_as_the_apis_are(lab, client, catalog):
    from clusters.models import Cluster
    from tests.clusters.test_pages import _order
    from tests.factories import make_ssh_key
    from tests.instances.test_console import _rent

    team, _owner, _admin, ana, _bo = lab
    make_ssh_key(ana)
    console(client, ana, team)

    assert _rent(client, catalog).status_code == 302
    assert _order(client, catalog).status_code == 302

    instance = Instance.objects.get(tenant=team, cluster_rank__isnull=True)
    cluster = Cluster.objects.get(tenant=team)
    ordered = AuditEvent.objects.filter(tenant=team, action__endswith=".ordered").order_by("at")
    assert [(e.action, e.object_id, e.actor_id) for e in ordered] == [
        ("instance.ordered", instance.pk, ana.pk),
        ("cluster.ordered", cluster.pk, ana.pk),
    ]
    assert ordered[1].data == {"nodes": 2}


def test_the_team_page_shows_a_member_the_budgets_the_api_shows(lab, client):
    """A plain member reads the team's budget and their own, not another member's, in the
    console as in the API; owners and admins read every one."""
    from starverse.accounts.models import Budget

    team, owner, admin, ana, bo = lab
    Budget.objects.create(tenant=team, user=None, monthly_fen=900_000)
    Budget.objects.create(tenant=team, user=ana, monthly_fen=123_400)
    Budget.objects.create(tenant=team, user=bo, monthly_fen=567_800)

    def seen(person):
        page = console(Client(), person, team).get(f"/teams/{team.pk}/").content.decode()
        api = bearer(person, team=team).get(f"/api/v1/teams/{team.pk}/budgets").json()
        amounts = {row["monthly_fen"] for row in api["results"]}
        shown = {fen for fen in (900_000, 123_400, 567_800) if f"¥{fen // 100:,}.00" in page}
        return shown, amounts

    assert seen(ana) == ({900_000, 123_400}, {900_000, 123_400})
    assert seen(owner) == seen(admin) == ({900_000, 123_400, 567_800},) * 2
