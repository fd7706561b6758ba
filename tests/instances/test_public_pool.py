"""The public pool at /public is read-only whatever its source: an inline NFS export, a
ReadOnlyMany claim the worker makes in each tenant namespace, or (development only) a host
directory, which production refuses unless the operator insists."""

import runpy
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

import starverse.settings.base
from instances.provisioning import manifests
from instances.provisioning.reconcile import reconcile
from starverse.core import kube
from tests.factories import load_production_settings, make_instance, make_user, read_existing

BASE = Path(starverse.settings.base.__file__)
REPO = BASE.parents[2]


def _public_mounts(pod):
    return [m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "public"]


def _public_volume(pod):
    return next(v for v in pod["spec"]["volumes"] if v["name"] == "public")


@pytest.mark.parametrize(
    ("source", "volume"),
    [
        (
            "nfs://nas.internal/export/public",
            {"nfs": {"server": "nas.internal", "path": "/export/public", "readOnly": True}},
        ),
        (
            "pvc://public-pool",
            {"persistentVolumeClaim": {"claimName": "public-pool", "readOnly": True}},
        ),
        (
            "hostpath:///srv/starverse/public",
            {"hostPath": {"path": "/srv/starverse/public", "type": "Directory"}},
        ),
    ],
)
def test_every_source_is_mounted_read_only(catalog, settings, source, volume):
    settings.PUBLIC_POOL_SOURCE = source
    settings.PUBLIC_POOL_STORAGE_CLASS = "nfs-public"
    pod = manifests.pod(make_instance(make_user()), "node-1")

    assert _public_volume(pod) == {"name": "public", **volume}
    assert [(m["mountPath"], m["subPath"], m["readOnly"]) for m in _public_mounts(pod)] == [
        ("/public/data", "data", True),
        ("/public/models", "models", True),
    ]


def test_a_pvc_pool_gets_a_read_only_claim_in_each_tenant_namespace(catalog, cluster, settings):
    settings.PUBLIC_POOL_SOURCE = "pvc://public-pool"
    settings.PUBLIC_POOL_STORAGE_CLASS = "nfs-public"
    instance = make_instance(make_user(), status="running")

    claim = read_existing("PersistentVolumeClaim", instance.k8s_namespace, "public-pool")
    assert claim["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert claim["spec"]["storageClassName"] == "nfs-public"
    pod = read_existing("Pod", instance.k8s_namespace, instance.k8s_name)
    assert _public_volume(pod)["persistentVolumeClaim"] == {
        "claimName": "public-pool",
        "readOnly": True,
    }
    namespace = read_existing("Namespace", None, instance.k8s_namespace)
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"

    assert reconcile().orphans == []  # the pool's claim is wanted while the pool is a claim
    assert kube.read("PersistentVolumeClaim", instance.k8s_namespace, "public-pool")


@pytest.mark.parametrize(
    "source",
    [
        "/srv/starverse/public",  # no scheme
        "ftp://pool/public",
        "nfs://",
        "nfs:///export",  # no server
        "pvc://Public_Pool",  # not a claim name
        "hostpath://srv/public",  # not absolute
    ],
)
def test_a_malformed_pool_source_stops_start_up(monkeypatch, source):
    monkeypatch.setenv("PUBLIC_POOL_SOURCE", source)

    with pytest.raises(ImproperlyConfigured, match="PUBLIC_POOL_SOURCE must be"):
        runpy.run_path(str(BASE))


def test_a_pvc_pool_needs_its_storage_class(monkeypatch):
    monkeypatch.setenv("PUBLIC_POOL_SOURCE", "pvc://public-pool")
    monkeypatch.delenv("PUBLIC_POOL_STORAGE_CLASS", raising=False)
    with pytest.raises(ImproperlyConfigured, match="PUBLIC_POOL_STORAGE_CLASS"):
        runpy.run_path(str(BASE))

    monkeypatch.setenv("PUBLIC_POOL_STORAGE_CLASS", "nfs-public")
    assert runpy.run_path(str(BASE))["PUBLIC_POOL_STORAGE_CLASS"] == "nfs-public"


def test_production_refuses_a_host_path_pool_unless_told():
    status, error = load_production_settings(PUBLIC_POOL_SOURCE="hostpath:///srv/starverse/public")
    assert status != 0
    assert "PUBLIC_POOL_SOURCE is a hostPath" in error

    assert (
        load_production_settings(PUBLIC_POOL_SOURCE=None)[0] != 0
    )  # the default is a host path too
    assert load_production_settings(PUBLIC_POOL_SOURCE="nfs://nas.internal/public") == (0, "")
    allowed = load_production_settings(
        PUBLIC_POOL_SOURCE="hostpath:///srv/starverse/public", PUBLIC_POOL_ALLOW_HOSTPATH="1"
    )
    assert allowed == (0, "")
