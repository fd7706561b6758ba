"""A cloud disk in the browser, in Chinese and in English: create it on the Disks page, attach
it to a running instance from the instance's page (which asks first, since the instance restarts
to mount it), and find it mounted at /mnt/<name>, on the page and in the pod on the cluster."""

from playwright.sync_api import Page, expect

from starverse.core import kube
from storage.models import Disk
from tests.e2e.steps import log_in, settle, submit_confirmed, t
from tests.factories import fund, make_instance, make_user


def test_create_a_disk_and_attach_it_to_a_running_instance(
    page: Page, lang, live_server, transactional_db, catalog, cluster
):
    base = live_server.url
    user = make_user()
    fund(user, 100_00)  # ¥100: the disk's first day, and an hour of the instance when it restarts
    instance = make_instance(user, status="running")
    log_in(page, base, user.email)

    page.goto(f"{base}/console/disks/")
    expect(page.locator("h1")).to_have_text(t(lang, "Disks"))
    expect(page.locator("#disk-list .empty")).to_be_visible()
    page.fill("#disk-name", "ckpt")
    page.fill("#disk-size", "50")
    with page.expect_navigation():
        page.locator("#new-disk button[type=submit]").click()
    row = page.locator("#disk-list tbody tr", has_text="ckpt")
    expect(row).to_contain_text("50 GB")
    expect(row).to_contain_text("/mnt/ckpt")
    disk = Disk.objects.get(tenant=user.tenant, name="ckpt")

    # the instance's page: attach, after the question, and it restarts with the disk
    page.goto(f"{base}/console/instances/{instance.id}/")
    expect(page.locator("#attach-disk option")).to_have_text(["ckpt · 50 GB"])
    question = submit_confirmed(page, "#disks form[action$='/disks/'] button[type=submit]")
    assert question == t(
        lang,
        "Attach the disk? The instance restarts to mount it: processes are stopped and what is "
        "only in memory is lost.",
    )
    assert settle(instance.id) == "running"
    disks = page.locator("#disks tbody tr", has_text="ckpt")
    expect(disks).to_contain_text("/mnt/ckpt")
    expect(page.locator("h1 [data-status-badge]")).to_have_attribute("data-status", "running")
    instance.refresh_from_db()
    disk.refresh_from_db()
    assert (instance.status, disk.instance_id) == ("running", instance.id)
    pod = kube.read("Pod", instance.k8s_namespace, instance.k8s_name)
    assert pod is not None
    claims = {
        volume["name"]: volume["persistentVolumeClaim"]["claimName"]
        for volume in pod["spec"]["volumes"]
        if "persistentVolumeClaim" in volume
    }
    mounts = {
        m["mountPath"]: claims.get(m["name"]) for m in pod["spec"]["containers"][0]["volumeMounts"]
    }
    assert mounts["/mnt/ckpt"] == disk.k8s_name

    # the Disks page says where it is
    page.goto(f"{base}/console/disks/")
    expect(row.locator("a")).to_have_text(instance.name)
