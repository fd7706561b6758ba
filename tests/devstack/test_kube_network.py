"""The kube emulator's stand-in for the cluster's Service network: a request whose Host names a
Service (as cluster DNS does) is answered for the ports the Service declares, by a stand-in page
of a Running, Ready pod behind it; Jupyter's wants the pod's token; and HTTPRoutes are stored
and checked like the Gateway API's CRD does."""

from __future__ import annotations

from typing import Any

import pytest
import requests
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from devstack.kube import KubeEmulator
from tests.devstack import error_body, pod_body, wait_for


def _service(name: str, selector: dict[str, str], *ports: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": selector, "ports": [{"port": p, "targetPort": p} for p in ports]},
    }


def _get(emu: KubeEmulator, service: str, port: int, **headers: str) -> requests.Response:
    host = emu.service_host("default", service, port)
    return requests.get(emu.url + "/some/page", headers={"Host": host, **headers}, timeout=10)


def _running(api: client.CoreV1Api, body: dict[str, Any]) -> None:
    api.create_namespaced_pod("default", body)
    name = body["metadata"]["name"]
    wait_for(
        lambda: api.read_namespaced_pod(name, "default").status.phase == "Running",
        f"pod {name} running",
    )


def test_a_service_port_answers_with_the_pod_stand_in(emu, api: client.CoreV1Api) -> None:
    api.create_namespaced_service("default", _service("board", {"app": "board"}, 6006))

    before = _get(emu, "board", 6006)
    _running(api, pod_body("board"))
    served = _get(emu, "board", 6006)
    undeclared = _get(emu, "board", 7860)
    missing = _get(emu, "nothing", 6006)

    assert before.status_code == 503 and "no endpoints available for service" in before.text
    assert served.status_code == 200
    assert "TensorBoard stand-in on port 6006 of pod default/board" in served.text
    assert undeclared.status_code == 502 and missing.status_code == 502
    # the API itself is still the API on the same address
    assert requests.get(emu.url + "/healthz", timeout=10).text == "ok"


def test_the_jupyter_stand_in_wants_the_pod_token(emu, api: client.CoreV1Api) -> None:
    api.create_namespaced_secret(
        "default",
        {"metadata": {"name": "lab-access"}, "stringData": {"jupyter_token": "s3cret"}},
    )
    body = pod_body("lab")  # the Secret mounted as the image contract has it
    body["spec"]["volumes"] = [{"name": "access", "secret": {"secretName": "lab-access"}}]
    body["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "access", "mountPath": "/etc/starverse/access", "readOnly": True}
    ]
    api.create_namespaced_service("default", _service("lab", {"app": "lab"}, 8888))
    _running(api, body)

    assert _get(emu, "lab", 8888).status_code == 403
    assert _get(emu, "lab", 8888, Authorization="token wrong").status_code == 403
    allowed = _get(emu, "lab", 8888, Authorization="token s3cret")
    assert allowed.status_code == 200 and "JupyterLab of pod default/lab" in allowed.text
    assert "s3cret" not in allowed.text


def test_httproutes_are_served_and_checked(emu, api: client.CoreV1Api) -> None:
    custom = client.CustomObjectsApi(api.api_client)
    route: dict[str, Any] = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "board"},
        "spec": {
            "parentRefs": [{"name": "instances", "namespace": "starverse-gateway"}],
            "hostnames": ["board.gw.example.com"],
            "rules": [{"backendRefs": [{"name": "board", "port": 6006}]}],
        },
    }
    args = ("gateway.networking.k8s.io", "v1", "default", "httproutes")

    custom.create_namespaced_custom_object(*args, route)
    listed = custom.list_namespaced_custom_object(*args)["items"]
    bad = {
        **route,
        "metadata": {"name": "bad"},
        "spec": {
            **route["spec"],
            "hostnames": ["board.gw.example.com:443"],
            "rules": [{"backendRefs": [{"name": "board"}]}],
        },
    }
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(*args, bad)

    assert [item["metadata"]["name"] for item in listed] == ["board"]
    assert refused.value.status == 422
    causes = {c["field"] for c in error_body(refused.value)["details"]["causes"]}
    assert causes == {"spec.hostnames[0]", "spec.rules[0].backendRefs[0].port"}
