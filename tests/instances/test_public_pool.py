"""The public pool at /public is read-only whatever its source: an inline NFS export, a
ReadOnlyMany claim the worker makes in each tenant namespace, or (development only) a host
directory, which production refuses unless the operator insists."""

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

import starverse.settings.base
from instances.provisioning import manifests
from instances.provisioning.reconcile import reconcile
from starverse.core import kube
from tests.factories import make_instance, make_user, read_existing

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


def _production(**env):
    """Load the production settings in a fresh interpreter; (exit status, stderr)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PUBLIC_POOL")}
    clean.update(
        DJANGO_SETTINGS_MODULE="starverse.settings.production",
        SECRET_KEY="production-check-" + "x" * 50,
        DATABASE_URL="postgres://unused@127.0.0.1:1/unused",
        REDIS_URL="redis://127.0.0.1:6379/0",
        STRIPE_SECRET_KEY="sk_test_production_check",
        STRIPE_WEBHOOK_SECRET="whsec_production_check",
        GATEWAY_CIDR="192.0.2.0/24",
        GATEWAY_DOMAIN="gw.example.com",
        **env,
    )
    clean.pop("DEBUG", None)
    result = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; settings.PUBLIC_POOL_SOURCE"],
        cwd=REPO,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return result.returncode, result.stderr


def test_production_refuses_a_host_path_pool_unless_told():
    status, error = _production(PUBLIC_POOL_SOURCE="hostpath:///srv/starverse/public")
    assert status != 0
    assert "PUBLIC_POOL_SOURCE is a hostPath" in error

    assert _production()[0] != 0  # the default is a host path too
    assert _production(PUBLIC_POOL_SOURCE="nfs://nas.internal/public") == (0, "")
    allowed = _production(
        PUBLIC_POOL_SOURCE="hostpath:///srv/starverse/public", PUBLIC_POOL_ALLOW_HOSTPATH="1"
    )
    assert allowed == (0, "")
