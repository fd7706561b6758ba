"""The system disk: what a tenant installs outside their disks (/usr, /etc, /opt, /root, /home,
/var) lives on the instance's own system-disk claim, seeded from the image by an init container
on the first start, and is still there after a stop and a start on another node; the claim goes
with the instance. Played on the kube emulator, whose init containers run the seeding program
(devstack/kube/seeding.py) and whose volumes keep their files."""

from fleet.services import node_cordon
from instances.models import Instance
from instances.provisioning import converge, manifests
from starverse.core import kube
from tests.factories import converge_until, host_path

PACKAGE = "/usr/local/lib/python3.10/dist-packages/flash_attn/__init__.py"


def _running(client, catalog) -> Instance:
    body = client.post(
        "/api/v1/instances",
        {"offering": catalog["h100x1"].id, "image": catalog["image"].id},
        format="json",
    ).json()
    assert converge_until(converge.provision, body["id"]) == "running"
    return Instance.objects.get(pk=body["id"])


def test_an_installed_package_survives_a_stop_and_a_start_on_another_node(renter, catalog, cluster):
    _user, client = renter
    instance = _running(client, catalog)
    first_node = instance.node
    # seeded from the image on the first start
    os_release = host_path(cluster, instance, "/etc/os-release")
    assert "emulated image" in os_release.read_text()
    assert host_path(cluster, instance, "/usr/bin/tini").read_text() == "emulated tini\n"
    # the tenant installs a package and edits a file of the image
    installed = host_path(cluster, instance, PACKAGE)
    installed.parent.mkdir(parents=True)
    installed.write_text("__version__ = '2.5.6'\n")
    host_path(cluster, instance, "/root/.bashrc").write_text("export CHANGED=1\n")

    client.post(f"/api/v1/instances/{instance.id}/stop")
    assert converge_until(converge.stop, instance.id) == "stopped"
    assert first_node is not None
    node_cordon(node=first_node, reason="maintenance", actor=None)
    client.post(f"/api/v1/instances/{instance.id}/start")
    assert converge_until(converge.provision, instance.id) == "running"

    instance.refresh_from_db()
    assert instance.node != first_node
    assert host_path(cluster, instance, PACKAGE).read_text() == "__version__ = '2.5.6'\n"
    # seeded once: the image's copy did not come back over the tenant's change
    assert host_path(cluster, instance, "/root/.bashrc").read_text() == "export CHANGED=1\n"
    pod = kube.read("Pod", instance.k8s_namespace, instance.k8s_name)
    assert pod is not None
    tools, seed = pod["status"]["initContainerStatuses"]
    assert tools["name"] == manifests.TOOLS_CONTAINER
    assert tools["state"]["terminated"]["exitCode"] == 0
    assert seed["state"]["terminated"]["exitCode"] == 0
    assert seed["state"]["terminated"]["message"] == (
        "starverse-seed-rootfs: seeded nothing (all kept)"
    )


def test_the_system_disk_is_the_offerings_size_and_goes_with_the_instance(renter, catalog, cluster):
    _user, client = renter
    catalog["h100x1"].system_disk_gb = 80
    catalog["h100x1"].save(update_fields=["system_disk_gb"])
    instance = _running(client, catalog)
    name = manifests.system_disk_name(instance.id)
    claim = kube.read("PersistentVolumeClaim", instance.k8s_namespace, name)
    assert claim is not None
    assert claim["spec"]["resources"]["requests"]["storage"] == "80Gi"
    detail = client.get(f"/api/v1/instances/{instance.id}").json()
    assert detail["system_disk"] == {"size_gb": 80, "used_gb": None}
    listed = client.get("/api/v1/instances").json()["results"][0]
    assert listed["system_disk"] == {"size_gb": 80, "used_gb": None}

    client.delete(f"/api/v1/instances/{instance.id}?keep_disk=true")
    assert converge_until(converge.terminate, instance.id) == "terminated"
    assert kube.read("PersistentVolumeClaim", instance.k8s_namespace, name) is None
    # the kept instance disk is a cloud disk now; the system disk is not kept with it
    assert kube.read(
        "PersistentVolumeClaim", instance.k8s_namespace, manifests.disk_name(instance.id)
    )


def test_the_seeding_container_is_hardened_like_the_main_one(renter, catalog, cluster):
    _user, client = renter
    instance = _running(client, catalog)
    found = kube.read("Pod", instance.k8s_namespace, instance.k8s_name)
    assert found is not None
    spec = found["spec"]
    tools, seed = spec["initContainers"]
    main = spec["containers"][0]
    assert seed["image"] == main["image"] == catalog["image"].container_image
    assert tools["securityContext"] == main["securityContext"]
    assert seed["command"] == [
        "/starverse-tools/bin/starverse-seed-rootfs",
        "/starverse-system",
        "usr",
        "etc",
        "opt",
        "root",
        "home",
        "var",
    ]
    assert seed["securityContext"]["privileged"] is False
    assert seed["securityContext"]["allowPrivilegeEscalation"] is False
    assert seed["securityContext"]["capabilities"]["add"] == [
        *manifests.CAPABILITIES,
        "FSETID",
    ]
    system_mounts = [m for m in main["volumeMounts"] if m["name"] == "system"]
    assert [(m["mountPath"], m["subPath"]) for m in system_mounts] == [
        (f"/{d}", d) for d in ("usr", "etc", "opt", "root", "home", "var")
    ]
