"""The gateway's objects on the cluster: the worker makes a Service and an HTTPRoute for each
port an instance serves (Jupyter's and the declared ones), follows changes of the ports, deletes
them with the instance, lets the gateway through the tenant's NetworkPolicy on those ports only,
and the reconcile loop removes what no instance wants. Against the local cluster."""

import runpy
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from django.core.exceptions import ImproperlyConfigured

import starverse.settings.base
from instances.gateway import instance_ports_set
from instances.lifecycle import instance_order, instance_terminate
from instances.models import Instance
from instances.provisioning import converge, manifests
from instances.provisioning.namespaces import tenant_namespaces_sweep
from instances.provisioning.reconcile import reconcile
from starverse.core import kube
from tests.factories import converge_until, fund, make_user, read_existing


def _order(catalog, ports):
    user = make_user()
    fund(user, 100_000)
    instance, _ = instance_order(
        user=user, offering_id=catalog["h100x1"].id, image_id="pytorch-2.1", ports=ports
    )
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    return instance


def _routes(instance):
    """Host name → (Service, port) of every HTTPRoute the instance has on the cluster."""
    names = kube.managed(
        "HTTPRoute", [instance.k8s_namespace], label_selector=manifests.port_selector(instance)
    )
    table = {}
    for namespace, name in names:
        spec = read_existing("HTTPRoute", namespace, name)["spec"]
        backend = spec["rules"][0]["backendRefs"][0]
        assert spec["parentRefs"] == [{"name": "instances", "namespace": "starverse-gateway"}]
        table[spec["hostnames"][0]] = (backend["name"], backend["port"])
    return table


def _port_services(instance):
    names = kube.managed(
        "Service", [instance.k8s_namespace], label_selector=manifests.port_selector(instance)
    )
    return {
        name: read_existing("Service", namespace, name)["spec"]["ports"][0]["port"]
        for namespace, name in names
    }


def _gateway_ports(namespace):
    policy = read_existing("NetworkPolicy", namespace, "tenant-isolation")
    rule = next(rule for rule in policy["spec"]["ingress"] if "ports" in rule)
    return [p["port"] for p in rule["ports"]], [peer["ipBlock"]["cidr"] for peer in rule["from"]]


def test_each_served_port_gets_a_route_and_a_service_and_they_go_with_the_instance(
    catalog, settings
):
    settings.GATEWAY_CIDR = ["192.0.2.0/24"]
    instance = _order(catalog, [6006])
    name = instance.k8s_name

    assert _routes(instance) == {
        f"{instance.id.lower().replace('_', '-')}-8888.localhost": (f"{name}-p8888", 8888),
        f"{instance.id.lower().replace('_', '-')}-6006.localhost": (f"{name}-p6006", 6006),
    }
    assert _port_services(instance) == {f"{name}-p8888": 8888, f"{name}-p6006": 6006}
    service = read_existing("Service", instance.k8s_namespace, f"{name}-p6006")["spec"]
    assert service["type"] == "ClusterIP"
    assert service["selector"] == {
        "starverse.io/instance": manifests.labels(instance)["starverse.io/instance"]
    }
    ssh = read_existing("Service", instance.k8s_namespace, name)["spec"]["ports"]
    assert [(p["name"], p["port"]) for p in ssh] == [("ssh", 22)]  # no NodePort besides SSH
    assert _gateway_ports(instance.k8s_namespace) == ([22, 8888, 6006], ["192.0.2.0/24"])

    instance_terminate(instance_id=instance.id)
    assert converge_until(converge.terminate, instance.id) == "terminated"
    assert _routes(instance) == {} and _port_services(instance) == {}


def test_ports_changed_while_running_are_followed_on_the_cluster(
    catalog, settings, django_capture_on_commit_callbacks
):
    settings.GATEWAY_CIDR = ["192.0.2.0/24"]
    instance = _order(catalog, [6006])
    name = instance.k8s_name

    with django_capture_on_commit_callbacks(execute=True) as sent:
        instance_ports_set(instance_id=instance.id, ports=[7860, 8000])

    assert len(sent) == 1  # instances.tasks.converge_ports, run by the eager worker
    assert _port_services(instance) == {
        f"{name}-p8888": 8888,
        f"{name}-p7860": 7860,
        f"{name}-p8000": 8000,
    }
    assert sorted(port for _service, port in _routes(instance).values()) == [7860, 8000, 8888]
    assert _gateway_ports(instance.k8s_namespace)[0] == [22, 8888, 7860, 8000]
    assert converge.ports_converge(instance.id) == []  # nothing left to do: made once


def test_ports_changed_before_the_objects_exist_wait_for_the_provisioning(catalog):
    user = make_user()
    fund(user, 100_000)
    instance, _ = instance_order(
        user=user, offering_id=catalog["h100x1"].id, image_id="pytorch-2.1"
    )
    Instance.objects.filter(pk=instance.pk).update(k8s_name="inst-x", k8s_namespace="sv-x")

    with pytest.raises(converge.StillPending):
        converge.ports_converge(instance.id)


def test_the_reconcile_loop_removes_the_routes_no_port_wants(catalog):
    instance = _order(catalog, [6006, 7860])
    name = instance.k8s_name
    # the ports change while the worker's task is lost
    Instance.objects.filter(pk=instance.pk).update(ports=[7860])

    report = reconcile()

    namespace = instance.k8s_namespace
    assert sorted(report.orphans) == [
        f"httproute/{namespace}/{name}-p6006",
        f"service/{namespace}/{name}-p6006",
    ]
    assert set(_port_services(instance)) == {f"{name}-p8888", f"{name}-p7860"}
    assert reconcile().orphans == []


def test_the_sweep_lets_the_gateway_reach_what_the_tenants_instances_declare(catalog, settings):
    settings.TENANT_SWEEP_CALLS_PER_S = 1000
    settings.GATEWAY_CIDR = ["192.0.2.0/24"]
    instance = _order(catalog, [6006])
    tenant_namespaces_sweep()
    # a port declared while the worker's task is lost: the sweep brings the policy along
    Instance.objects.filter(pk=instance.pk).update(ports=[6006, 9000])

    assert tenant_namespaces_sweep().updated == [instance.k8s_namespace]
    assert _gateway_ports(instance.k8s_namespace)[0] == [22, 8888, 6006, 9000]
    assert tenant_namespaces_sweep().updated == []


def test_the_cluster_refuses_a_route_whose_host_name_has_a_port(cluster):
    route = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "bad", "namespace": "default"},
        "spec": {
            "parentRefs": [{"name": "instances"}],
            "hostnames": ["ins-x-6006.localhost:8002"],
            "rules": [{"backendRefs": [{"name": "svc"}]}],
        },
    }

    with pytest.raises(kube.PermanentKubeError, match="422"):
        kube.ensure(route)


def test_a_malformed_route_parent_stops_start_up(monkeypatch):
    monkeypatch.setenv("GATEWAY_ROUTE_PARENT", "just-a-name")
    with pytest.raises(ImproperlyConfigured, match="GATEWAY_ROUTE_PARENT"):
        runpy.run_path(str(Path(starverse.settings.base.__file__)))


def test_the_gateway_manifest_fits_the_routes_the_worker_makes(settings):
    """deploy/k8s/gateway.yaml and what the worker and the console expect of it agree: the
    routes attach to its Gateway from tenant namespaces, under its wildcard host name, and
    its authorization check is the console's, adding Jupyter's token upstream."""
    settings.GATEWAY_DOMAIN = "gw.example.com"
    deploy = Path(__file__).resolve().parents[2] / "deploy" / "k8s"
    docs = [d for d in yaml.safe_load_all((deploy / "gateway.yaml").read_text()) if d]
    kinds = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    platform = [d for d in yaml.safe_load_all((deploy / "platform.yaml").read_text()) if d]
    route = manifests.http_route(SimpleNamespace(id="ins_AbC", tenant_id="tnt_x"), 6006)

    parent = route["spec"]["parentRefs"][0]
    gateway = kinds[("Gateway", parent["name"])]
    assert gateway["metadata"]["namespace"] == parent["namespace"]
    https = next(x for x in gateway["spec"]["listeners"] if x["protocol"] == "HTTPS")
    assert https["hostname"] == "*." + settings.GATEWAY_DOMAIN
    assert route["spec"]["hostnames"] == ["ins-abc-6006.gw.example.com"]
    wanted = https["allowedRoutes"]["namespaces"]["selector"]["matchLabels"]
    assert wanted.items() <= kube.namespace("tnt_x")["metadata"]["labels"].items()

    auth = kinds[("SecurityPolicy", "instances-auth")]["spec"]["extAuth"]
    assert auth["http"]["path"] == "/gateway/auth"
    assert auth["http"]["headersToBackend"] == ["authorization"]
    assert "cookie" in auth["headersToExtAuth"]
    backend = auth["http"]["backendRefs"][0]
    web = next(d for d in platform if (d["kind"], d["metadata"]["name"]) == ("Service", "web"))
    assert (backend["namespace"], backend["port"]) == (
        web["metadata"]["namespace"],
        web["spec"]["ports"][0]["port"],
    )
