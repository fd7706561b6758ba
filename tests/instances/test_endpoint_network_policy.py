"""The tenant namespace's policy for inference endpoints: the endpoints' pods, and only they,
take port 8000 from the gateway's and the KEDA interceptor's namespaces; the tenant's isolation
policy gains nothing."""

from endpoints import manifests as endpoint_manifests
from endpoints.engines import ENGINE_PORT
from endpoints.provisioning import endpoint_converge
from instances.provisioning import manifests
from instances.provisioning.namespaces import policy_fingerprint
from tests.factories import make_endpoint, make_user, read_existing


def _from(namespace):
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}


def test_the_rendered_policy_admits_port_8000_of_endpoint_pods_from_two_namespaces():
    policy = manifests.endpoint_network_policy("ten_abc")

    assert policy["metadata"] == {
        "name": "endpoint-ingress",
        "namespace": "sv-ten-abc",
        "labels": {"app.kubernetes.io/managed-by": "starverse"},
    }
    assert policy["spec"] == {
        "podSelector": {
            "matchExpressions": [{"key": "starverse.io/endpoint", "operator": "Exists"}]
        },
        "policyTypes": ["Ingress"],
        "ingress": [
            {
                "from": [_from("envoy-gateway-system"), _from("keda")],
                "ports": [{"port": 8000, "protocol": "TCP"}],
            }
        ],
    }
    # what it selects and opens is what endpoints render
    assert endpoint_manifests.ENDPOINT_LABEL == "starverse.io/endpoint"
    assert manifests.ENDPOINT_PORT == ENGINE_PORT


def test_the_namespaces_are_the_operators_settings(settings):
    before = policy_fingerprint("ten_abc", {})
    settings.ENDPOINT_GATEWAY_NAMESPACE = "gateway"
    settings.ENDPOINT_INTERCEPTOR_NAMESPACE = "keda-http"

    rule = manifests.endpoint_network_policy("ten_abc")["spec"]["ingress"][0]

    assert rule["from"] == [_from("gateway"), _from("keda-http")]
    # existing namespaces are brought up to date by the sweep
    assert policy_fingerprint("ten_abc", {}) != before


def test_the_isolation_policy_opens_nothing_new():
    isolation = manifests.network_policy("ten_abc", [8080])

    assert "8000" not in str(isolation["spec"]["ingress"])
    assert "namespaceSelector" not in str(isolation["spec"]["ingress"])


def test_an_endpoints_namespace_gets_the_policy_on_the_cluster(catalog):
    endpoint = make_endpoint(make_user())
    endpoint_converge(endpoint.id)
    endpoint.refresh_from_db()

    made = read_existing("NetworkPolicy", endpoint.k8s_namespace, "endpoint-ingress")
    assert made["spec"] == manifests.endpoint_network_policy(endpoint.tenant_id)["spec"]
    pod_labels = read_existing("Deployment", endpoint.k8s_namespace, endpoint.k8s_name)["spec"][
        "template"
    ]["metadata"]["labels"]
    assert "starverse.io/endpoint" in pod_labels
