import re

from instances.models import Instance
from instances.provisioning import converge
from tests.factories import converge_until, fund, make_instance, make_ssh_key, make_user


def _token(page) -> str:
    match = re.search(r'name="token" value="([^"]+)"', page.content.decode())
    assert match, "the rent form has no token"
    return match.group(1)


def _rent(client, catalog, offering="h100x1", token=None, **extra):
    token = token or _token(client.get("/console/rent/"))
    data = {
        "offering": catalog[offering].id,
        "image": catalog["image"].id,
        "billing": "hourly",
        "name": "llama-ft",
        "token": token,
        **extra,
    }
    return client.post("/console/rent/", data)


def _renter(client, fen=100_000):
    user = make_user()
    fund(user, fen)
    client.force_login(user)
    return user


def test_rent_page_lists_offerings_with_live_availability(catalog, client):
    client.force_login(make_user())

    page = client.get("/console/rent/")

    html = page.content.decode()
    assert page.status_code == 200
    assert "8× H100 80GB SXM bare metal" in html and "4× RTX 4090 24GB" in html
    assert "16 available" in html  # 1× H100 on 2×8 free H100s
    assert "2 available" in html  # the two whole H100 nodes
    assert "¥128,000.00" in html  # monthly price of a whole node
    assert 'type="radio" name="offering"' in html and _token(page)
    assert "¥10.00" in html  # the trial balance, in the confirmation box


def test_rent_page_shows_sold_out_offerings_as_queueing(catalog, client):
    user = _renter(client, 10_000_000)
    for _ in range(2):
        _rent(client, catalog, offering="h100_node")
    assert Instance.objects.filter(created_by=user).count() == 2

    html = client.get("/console/rent/").content.decode()

    assert "Sold out — orders queue" in html


def test_rent_form_orders_once_even_when_posted_twice(catalog, client):
    user = _renter(client)
    token = _token(client.get("/console/rent/"))

    first = _rent(client, catalog, token=token)
    second = _rent(client, catalog, token=token)

    instance = Instance.objects.get(tenant=user.tenant)
    assert first.status_code == second.status_code == 302
    assert first["Location"] == second["Location"] == f"/console/instances/{instance.id}/"
    assert (instance.name, instance.offering_id) == ("llama-ft", catalog["h100x1"].id)
    assert instance.status == "provisioning"
    third = _rent(client, catalog)  # a fresh form is a new order
    assert third.status_code == 302
    assert Instance.objects.filter(tenant=user.tenant).count() == 2


def test_a_stale_form_for_a_different_order_is_refused_with_a_new_token(catalog, client):
    _renter(client)
    token = _token(client.get("/console/rent/"))
    _rent(client, catalog, token=token)

    again = _rent(client, catalog, offering="h100x8", token=token)

    assert again.status_code == 409
    assert "already used to place a different order" in again.content.decode()
    assert _token(again) != token
    assert Instance.objects.count() == 1


def test_no_balance_rerenders_with_the_message_and_keeps_the_choices(catalog, client):
    # ¥10 of trial credit, which 8× H100 (cloud, ¥176 an hour) has no trial price to take
    client.force_login(make_user())
    token = _token(client.get("/console/rent/"))

    page = _rent(client, catalog, offering="h100x8", token=token, name="big-run")

    html = page.content.decode()
    assert page.status_code == 402
    assert "does not cover ¥176.00" in html
    assert Instance.objects.count() == 0
    assert re.search(rf'value="{catalog["h100x8"].id}"\s+checked', html)
    assert 'value="big-run"' in html
    assert _token(page) == token  # nothing was ordered, so the same form may be sent again


def test_monthly_billing_of_a_cloud_gpu_is_refused(catalog, client):
    _renter(client)

    page = _rent(client, catalog, billing="monthly")

    assert page.status_code == 400
    assert "Monthly billing is offered for whole nodes only." in page.content.decode()
    assert Instance.objects.count() == 0


def test_another_users_instance_is_not_found(catalog, client):
    owner = make_user()
    instance = make_instance(owner, status="running")
    client.force_login(make_user())

    assert client.get(f"/console/instances/{instance.id}/").status_code == 404
    for action in ("stop", "start", "terminate"):
        assert client.post(f"/console/instances/{instance.id}/{action}/").status_code == 404
    assert instance.id not in client.get("/console/instances/").content.decode()
    instance.refresh_from_db()
    assert instance.status == "running"


def test_actions_are_post_only(catalog, client):
    user = _renter(client)
    instance = make_instance(user, status="running")

    for action in ("stop", "start", "terminate"):
        assert client.get(f"/console/instances/{instance.id}/{action}/").status_code == 405


def test_stop_start_terminate_through_the_console(catalog, client, cluster):
    user = _renter(client)
    make_ssh_key(user)
    instance = Instance.objects.get(pk=_rent(client, catalog)["Location"].split("/")[-2])
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()

    page = client.get(f"/console/instances/{instance.id}/").content.decode()
    assert f"ssh -p {instance.ssh_port} root@" in page
    jupyter = f"http://{instance.id.lower().replace('_', '-')}-8888.localhost:8002/"
    assert f'href="{jupyter}"' in page  # through the gateway, with no token in it
    assert instance.jupyter_token not in page
    assert "plain HTTP" in page  # the development gateway is not encrypted
    assert "Running: billing started." in page  # the timeline
    assert 'name="csrfmiddlewaretoken"' in page and "{{" not in page

    stopped = client.post(f"/console/instances/{instance.id}/stop/", follow=True)
    assert stopped.redirect_chain[-1][0] == f"/console/instances/{instance.id}/"
    assert "billing has stopped" in stopped.content.decode()
    assert converge_until(converge.stop, instance.id) == "stopped"
    again = client.post(f"/console/instances/{instance.id}/stop/", follow=True)
    assert "cannot be" in again.content.decode()  # the service's refusal, shown as is

    back = "/console/instances/"
    started = client.post(f"/console/instances/{instance.id}/start/", {"next": back})
    assert started["Location"] == back
    instance.refresh_from_db()
    assert instance.status == "provisioning"
    assert converge_until(converge.provision, instance.id) == "running"

    elsewhere = client.post(
        f"/console/instances/{instance.id}/terminate/", {"next": "https://evil.example/"}
    )
    assert elsewhere["Location"] == f"/console/instances/{instance.id}/"
    instance.refresh_from_db()
    assert instance.status == "terminating"
    assert converge_until(converge.terminate, instance.id) == "terminated"
    assert instance.id not in client.get("/console/instances/").content.decode()
    assert instance.id in client.get("/console/instances/?view=terminated").content.decode()


def test_queued_instance_page_explains_the_wait(catalog, client, settings):
    settings.MAX_RUNNING_GPUS = 24  # three whole nodes, the third queued
    _renter(client, 10_000_000)
    for _ in range(3):
        _rent(client, catalog, offering="h100_node")
    queued = Instance.objects.get(status="queued")

    page = client.get(f"/console/instances/{queued.id}/").content.decode()

    assert 'data-field="queue">1</span>' in page
    assert "ssh -p" not in page


def test_list_and_dashboard_show_running_instances(catalog, client):
    user = _renter(client)
    running = make_instance(user, status="running")
    make_instance(user, status="stopped")

    listing = client.get("/console/instances/").content.decode()
    dashboard = client.get("/console/").content.decode()

    assert listing.count('data-instance="') == 2
    assert "inst-status-running" in listing and "inst-status-stopped" in listing
    assert 'name="csrfmiddlewaretoken"' in listing and "{{" not in listing
    assert f"/console/instances/{running.id}/" in dashboard
    assert "Running instances" in dashboard
    assert "arrives with the Rent page" not in dashboard


def test_navigation_points_at_the_new_pages(client, user):
    client.force_login(user)

    html = client.get("/console/").content.decode()

    assert 'href="/console/rent/"' in html and 'href="/console/instances/"' in html
    assert 'href="/console/disks/"' in html and 'href="/console/datasets/"' in html
    assert client.get("/console/disks/").status_code == 200


def test_disks_page_creates_grows_attaches_and_deletes(catalog, client, cluster):
    from storage.models import Disk

    user = _renter(client)
    page = client.get("/console/disks/").content.decode()
    assert "No cloud disks yet" in page and "Create shared NAS" in page

    client.post("/console/disks/new/", {"name": "ckpt", "size_gb": "100"})
    disk = Disk.objects.get(tenant_id=user.tenant_id, name="ckpt")
    bad = client.post("/console/disks/new/", {"name": "a b", "size_gb": "5"}, follow=True)
    assert "A disk name is 1–63 letters" in bad.content.decode()
    client.post(f"/console/disks/{disk.id}/resize/", {"size_gb": "300"})
    disk.refresh_from_db()
    assert disk.size_gb == 300

    rented = _rent(client, catalog, disks=[disk.id])
    instance = Instance.objects.get(tenant_id=user.tenant_id)
    assert rented.status_code == 302 and list(instance.disks.all()) == [disk]
    converge_until(converge.provision, instance.id)
    detail = client.get(f"/console/instances/{instance.id}/").content.decode()
    assert "/mnt/ckpt" in detail and "Detach and restart" in detail and "/public/models" in detail
    refused = client.post(f"/console/disks/{disk.id}/delete/", follow=True).content.decode()
    assert "is attached to" in refused
    listing = client.get("/console/disks/").content.decode()
    assert instance.name in listing and "/<wbr>mnt/<wbr>ckpt" in listing  # breaks after a slash

    client.post(f"/console/instances/{instance.id}/terminate/", {"keep_disk": "1"})
    converge_until(converge.terminate, instance.id)
    kept = Disk.objects.get(origin=instance.id)
    assert kept.name == "llama-ft-disk"
    disk.refresh_from_db()
    assert disk.status == "available"
    client.post(f"/console/disks/{disk.id}/delete/")
    disk.refresh_from_db()
    assert disk.status == "deleting"


def test_disks_page_shows_the_countdown_of_unpaid_storage(catalog, client):
    from datetime import timedelta

    from django.utils import timezone

    from storage.models import StorageArrears

    user = _renter(client)
    client.post("/console/disks/new/", {"name": "ckpt", "size_gb": "100"})
    StorageArrears.objects.create(
        tenant_id=user.tenant_id, deadline=timezone.now() + timedelta(days=6, hours=1)
    )

    page = client.get("/console/disks/").content.decode()

    assert "Your storage will be deleted in 7 days" in page


def test_another_users_disk_is_not_found_in_the_console(catalog, client):
    from storage.disks import disk_create

    owner = make_user()
    fund(owner, 10_000)
    disk = disk_create(user=owner, name="theirs", size_gb=10)
    _renter(client)

    assert client.post(f"/console/disks/{disk.id}/delete/").status_code == 404
    assert client.post(f"/console/disks/{disk.id}/resize/", {"size_gb": "50"}).status_code == 404
    assert "theirs" not in client.get("/console/disks/").content.decode()


def test_rent_form_carries_the_recovery_choice_for_cloud_gpus_only(catalog, client):
    user = _renter(client, fen=1_000_000)
    page = client.get("/console/rent/").content.decode()
    assert 'name="auto_recover" value="on" checked' in page

    _rent(client, catalog, auto_recover="on")
    _rent(client, catalog)  # unticked
    _rent(client, catalog, offering="h100_node", auto_recover="on")

    rows = list(
        Instance.objects.filter(tenant_id=user.tenant_id)
        .order_by("created_at")
        .values_list("offering__kind", "auto_recover")
    )
    assert rows == [("cloud", True), ("cloud", False), ("bare_metal", False)]


def test_the_no_sshd_note_is_make_runs_only(catalog, client, settings):
    """Beside the SSH command only where bin/run says the emulated pods run no sshd
    (DEV_PODS_WITHOUT_SSHD): never under the base settings production runs on."""
    user = make_user()
    make_ssh_key(user)
    instance = make_instance(user, status="running")
    client.force_login(user)
    page = f"/console/instances/{instance.id}/"

    assert settings.DEV_PODS_WITHOUT_SSHD is False
    assert 'id="no-sshd"' not in client.get(page).content.decode()
    settings.DEV_PODS_WITHOUT_SSHD = True
    shown = client.get(page).content.decode()
    assert shown.index('id="ssh-command"') < shown.index('id="no-sshd"')
    assert "MAKE_RUN_SSHD=1 make run" in shown
