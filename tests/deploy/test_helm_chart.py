"""The Helm chart (deploy/helm/starverse), linted and rendered by Helm's own Go SDK (the
helm-python-sdk wheel: Helm's engine as a library, no helm binary), with the default and the
production values; every rendered object of a built-in kind is validated against the Kubernetes
OpenAPI schema (kubernetes-validate, strict), and the chart keeps what the platform relies on:
the worker's RBAC exactly as deploy/k8s/platform.yaml, one beat, probes on /healthz and
/readyz, migrations as a hook, secrets only from existing Secrets."""

from pathlib import Path
from typing import Any

import helm_python as helm  # Helm's Go SDK: requirements-dev.lock, installed by make test
import kubernetes_validate
import pytest
import yaml

from tests.factories import load_production_settings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "starverse"
PLATFORM = ROOT / "deploy" / "k8s" / "platform.yaml"
NAMESPACE = "starverse-system"
KUBE_VERSIONS = ("1.30.0", str(kubernetes_validate.latest_version()))

# Kinds of the optional parts that come from CRDs (gateway, cert-manager, Prometheus Operator):
# no schema in kubernetes-validate; their shape is checked below.
CRD_KINDS = {
    "Certificate",
    "Cluster",
    "ClusterIssuer",
    "EnvoyProxy",
    "Gateway",
    "GatewayClass",
    "HTTPRoute",
    "ObjectStore",
    "PodMonitor",
    "ReferenceGrant",
    "ScheduledBackup",
    "SecurityPolicy",
    "ServiceMonitor",
}


def production_values() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values-production.yaml").read_text())


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(
            values or {}, name="starverse", namespace=NAMESPACE, is_install=True
        )
    return [doc for text in rendered.values() for doc in yaml.safe_load_all(text) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def container(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]["containers"][0]


def env_of(doc: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(doc)["env"]}


@pytest.mark.parametrize("values", [None, "production"])
def test_helm_lint_is_clean(values):
    report = helm.lint(
        CHART,
        production_values() if values else None,
        strict=True,
        namespace=NAMESPACE,
        kube_version="v1.30.0",
    )
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert (report["errors"], problems) == ([], [])


@pytest.mark.parametrize("values", [None, "production"])
@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_every_rendered_object_validates_against_the_kubernetes_schema(values, kube_version):
    docs = render(production_values() if values else None)
    names = set()
    for doc in docs:
        assert doc["apiVersion"] and doc["metadata"]["name"]
        key = (doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"])
        assert key not in names, f"{key} rendered twice"
        names.add(key)
        if doc["kind"] in CRD_KINDS:
            assert isinstance(doc["spec"], dict) and doc["spec"]
            continue
        kubernetes_validate.validate(doc, kube_version, strict=True)
    kinds = {d["kind"] for d in docs}
    assert {
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "Job",
        "DaemonSet",
        "ClusterRole",
        "Ingress",
    } <= kinds
    assert ("Gateway" in kinds, "ServiceMonitor" in kinds) == (bool(values), bool(values))


def test_the_workers_rbac_is_exactly_that_of_platform_yaml():
    platform = [d for d in yaml.safe_load_all(PLATFORM.read_text()) if d]
    want = {d["metadata"]["name"]: d["rules"] for d in platform if d["kind"] == "ClusterRole"}
    chart = render()
    have = {name: d["rules"] for name, d in by_kind(chart, "ClusterRole").items()}
    assert have == want
    policies = {
        d["metadata"]["name"]: d["spec"]
        for d in platform
        if d["kind"] == "ValidatingAdmissionPolicy"
    }
    assert {
        n: d["spec"] for n, d in by_kind(chart, "ValidatingAdmissionPolicy").items()
    } == policies
    (binding,) = by_kind(chart, "ClusterRoleBinding").values()
    assert binding["roleRef"]["name"] == "starverse-worker"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "starverse-worker", "namespace": NAMESPACE}
    ]
    accounts = by_kind(chart, "ServiceAccount")
    tokens = {name: a["automountServiceAccountToken"] for name, a in accounts.items()}
    assert tokens == {
        "starverse-web": False,
        "starverse-beat": False,
        "starverse-worker": True,
        "starverse-terminal": True,
    }


def test_workloads_keep_the_platforms_rules():
    docs = render(production_values())
    deployments = by_kind(docs, "Deployment")
    assert set(deployments) == {"web", "terminal", "worker", "beat", "node-watch"}

    web = deployments["web"]
    probes = container(web)
    assert probes["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert probes["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert probes["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert web["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert env_of(web)["KUBE_ACCESS"] == "false"
    assert env_of(web)["METRICS_TOKEN"] == {
        "secretKeyRef": {"name": "starverse-metrics", "key": "METRICS_TOKEN"}
    }
    assert "replicas" not in web["spec"]  # the HPA owns it
    assert by_kind(docs, "HorizontalPodAutoscaler")["web"]["spec"]["minReplicas"] == 3
    assert by_kind(docs, "PodDisruptionBudget")["web"]["spec"]["minAvailable"] == 2

    beat = deployments["beat"]
    assert (beat["spec"]["replicas"], beat["spec"]["strategy"]) == (1, {"type": "Recreate"})
    assert env_of(beat)["KUBE_ACCESS"] == "false"
    assert env_of(deployments["terminal"])["KUBE_ACCESS"] == "exec"
    worker = env_of(deployments["worker"])
    assert "KUBE_ACCESS" not in worker and worker["KUBECONFIG"] == "in-cluster"
    assert worker["METRICS_PORT"] == "9808"

    for doc in [*deployments.values(), *by_kind(docs, "Job").values()]:
        env = env_of(doc)
        for name in ("DATABASE_URL", "REDIS_URL", "STRIPE_SECRET_KEY", "STRIPE_WEBHOOK_SECRET"):
            assert set(env[name]) == {"secretKeyRef"}, (doc["metadata"]["name"], name)
        assert container(doc)["envFrom"] == [{"secretRef": {"name": "starverse-env"}}]

    job = by_kind(docs, "Job")["migrate"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert container(job)["command"] == ["python", "manage.py", "migrate", "--noinput"]

    agent = by_kind(docs, "DaemonSet")["node-agent"]
    volumes = {v["name"]: v for v in agent["spec"]["template"]["spec"]["volumes"]}
    assert volumes["bootstrap"]["secret"]["secretName"] == "node-agent-bootstrap"
    assert env_of(agent)["NODEAGENT_PLATFORM_URL"] == f"http://web.{NAMESPACE}.svc"
    assert env_of(agent)["NODEAGENT_METRICS_PORT"] == "9400"


def test_the_gateway_follows_the_gateway_domain():
    docs = render(production_values())
    gateway = by_kind(docs, "Gateway")["instances"]
    hosts = {listener["hostname"] for listener in gateway["spec"]["listeners"]}
    assert hosts == {"*.gw.starverse-usercontent.example"}
    policy = by_kind(docs, "SecurityPolicy")["instances-auth"]
    assert policy["spec"]["extAuth"]["http"]["backendRefs"] == [
        {"name": "web", "namespace": NAMESPACE, "port": 80}
    ]


def test_each_extra_region_mounts_its_kubeconfig_secret_into_the_worker_and_terminal():
    """docs/operator-guide.md "Regions": a second cluster's kubeconfig reaches the worker (and the
    terminal's exec-only one the terminal) from an existing Secret, at the path region_register
    names; the web tier and beat get none."""
    regions = [
        {
            "name": "cn-north-1",
            "kubeconfigSecret": "cluster-cn-north-1",
            "terminalSecret": "cluster-cn-north-1-exec",
        },
        {"name": "cn-east-2", "kubeconfigSecret": "cluster-cn-east-2"},
    ]
    docs = render({**production_values(), "regions": regions})
    for kube_version in KUBE_VERSIONS:
        for doc in docs:
            if doc["kind"] in ("Deployment",):
                kubernetes_validate.validate(doc, kube_version, strict=True)
    deployments = by_kind(docs, "Deployment")

    def mounts(name: str) -> dict[str, str]:
        spec = deployments[name]["spec"]["template"]["spec"]
        secrets = {v["name"]: v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
        return {
            m["mountPath"]: secrets[m["name"]]
            for m in container(deployments[name])["volumeMounts"]
            if m["name"] in secrets and m.get("readOnly")
        }

    assert mounts("worker") == {
        "/etc/starverse/clusters/cn-north-1": "cluster-cn-north-1",
        "/etc/starverse/clusters/cn-east-2": "cluster-cn-east-2",
    }
    assert mounts("terminal") == {"/etc/starverse/clusters/cn-north-1": "cluster-cn-north-1-exec"}
    assert mounts("web") == {} and mounts("beat") == {}


def test_one_lost_node_watch_per_region_each_with_its_clusters_credentials():
    """docs/operator-guide.md "Detecting a lost node": the node-watch Deployment runs one
    `fleet_watch_nodes --region` per region (the default one and each extra), one replica that
    is gone before its successor starts, each reading its own region's kubeconfig."""
    regions = [{"name": "cn-north-1", "kubeconfigSecret": "cluster-cn-north-1"}]
    docs = render({**production_values(), "regions": regions})
    watch = by_kind(docs, "Deployment")["node-watch"]
    for kube_version in KUBE_VERSIONS:
        kubernetes_validate.validate(watch, kube_version, strict=True)
    spec = watch["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "starverse-worker"
    commands = {c["name"]: c["command"] for c in pod["containers"]}
    assert commands == {
        "watch-default": ["python", "manage.py", "fleet_watch_nodes", "--region", "default"],
        "watch-cn-north-1": ["python", "manage.py", "fleet_watch_nodes", "--region", "cn-north-1"],
    }
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    mounted = {
        c["name"]: sorted(secrets[m["name"]] for m in c["volumeMounts"] if m["name"] in secrets)
        for c in pod["containers"]
    }
    assert mounted == {"watch-default": [], "watch-cn-north-1": ["cluster-cn-north-1"]}


def test_media_persistence_shares_one_claim_between_web_and_worker():
    """docs/operator-guide.md "Deploy": with `media.persistence.enabled` the web pods and the worker
    mount one ReadWriteMany claim (the chart's, kept on uninstall, or an existing one) at the path
    MEDIA_ROOT names; off (the default), there is no claim and MEDIA_ROOT is left to
    STARVERSE_VAR_DIR."""
    persistence = {"enabled": True, "size": "50Gi", "storageClass": "cephfs"}
    docs = render({"media": {"persistence": persistence}})
    for kube_version in KUBE_VERSIONS:
        for doc in docs:
            if doc["kind"] in ("Deployment", "PersistentVolumeClaim"):
                kubernetes_validate.validate(doc, kube_version, strict=True)
    claim = by_kind(docs, "PersistentVolumeClaim")["starverse-media"]
    assert claim["metadata"]["namespace"] == NAMESPACE
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"] == "cephfs"
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"

    def media(docs: list[dict[str, Any]], name: str) -> tuple[Any, Any, Any]:
        deployment = by_kind(docs, "Deployment")[name]
        claims = {
            v["name"]: v["persistentVolumeClaim"]["claimName"]
            for v in deployment["spec"]["template"]["spec"]["volumes"]
            if "persistentVolumeClaim" in v
        }
        mounts = [
            (m["mountPath"], claims[m["name"]])
            for m in container(deployment)["volumeMounts"]
            if m["name"] in claims
        ]
        return env_of(deployment).get("MEDIA_ROOT"), mounts, claims

    path = "/var/lib/starverse/media"
    for name in ("web", "worker"):
        assert media(docs, name) == (
            path,
            [(path, "starverse-media")],
            {"media": "starverse-media"},
        )
    assert media(docs, "beat") == (None, [], {})

    mine = render({"media": {"persistence": {**persistence, "existingClaim": "invoices-nfs"}}})
    assert "PersistentVolumeClaim" not in {d["kind"] for d in mine}
    assert media(mine, "worker") == (path, [(path, "invoices-nfs")], {"media": "invoices-nfs"})

    plain = render()
    assert "PersistentVolumeClaim" not in {d["kind"] for d in plain}
    assert media(plain, "web") == (None, [], {})


def _routed(ingress: dict[str, Any], path: str) -> str | None:
    """The Service the Ingress sends `path` to (Kubernetes' rules: an Exact path matches only
    itself; a Prefix matches whole path elements; the longest match wins), or None."""
    elements = [e for e in path.split("/") if e]
    best: tuple[int, str] | None = None
    for rule in ingress["spec"]["rules"]:
        for entry in rule["http"]["paths"]:
            wanted = entry["path"]
            if entry["pathType"] == "Exact":
                matched = wanted == path
            else:
                prefix = [e for e in wanted.split("/") if e]
                matched = elements[: len(prefix)] == prefix
            if matched and (best is None or len(wanted) > best[0]):
                best = (len(wanted), entry["backend"]["service"]["name"])
    return best[1] if best else None


@pytest.mark.parametrize("values", [None, "production"])
def test_the_ingress_routes_the_console_and_the_terminal_never_metrics_or_probes(values):
    """docs/operator-guide.md "Security model": /metrics is refused at the edge (Prometheus scrapes
    the pods inside the cluster), and so are the probes and the gateway's check; every address of
    the console's URLs is routed to the web tier."""
    from django.urls import get_resolver

    def routes(patterns: list[Any], prefix: str = "") -> list[str]:
        found = []
        for pattern in patterns:
            route = prefix + str(pattern.pattern).lstrip("^")
            found += (
                routes(pattern.url_patterns, route) if hasattr(pattern, "url_patterns") else [route]
            )
        return found

    (ingress,) = by_kind(render(production_values() if values else None), "Ingress").values()
    tops = {route.split("/")[0] for route in routes(get_resolver().url_patterns)}
    console = [f"/{top}/x" for top in sorted(tops - {"", "favicon.ico", "gateway"})]

    assert {path: _routed(ingress, path) for path in console} == dict.fromkeys(console, "web")
    for path in ("/", "/favicon.ico", "/gateway/login", "/static/console.css", "/api/v1/me"):
        assert _routed(ingress, path) == "web", path
    assert _routed(ingress, "/terminal/ins_abc/ws") == "terminal"
    for path in ("/metrics", "/healthz", "/readyz", "/gateway/auth", "/gateway/auth/lab", "/x"):
        assert _routed(ingress, path) is None, path


def _plain_env(doc: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(doc)["env"] if "value" in e}


@pytest.mark.parametrize("values", [None, "production"])
def test_the_charts_values_start_the_production_settings(values):
    """The console and the gateway on sites of their own, tenant egress closed to the nodes:
    the web tier's plain settings, with dummies for the secrets, pass production's checks."""
    web = by_kind(render(production_values() if values else None), "Deployment")["web"]
    env = _plain_env(web)

    assert env["CLUSTER_NODE_CIDR"]
    assert load_production_settings(**env) == (0, "")


def test_the_chart_refuses_to_render_without_the_nodes_addresses():
    with pytest.raises(helm.errors.HelmRenderError, match=r"env\.CLUSTER_NODE_CIDR is required"):
        render({"env": {"CLUSTER_NODE_CIDR": ""}})  # merged over values.yaml's


CNPG = {
    "postgresql": {
        "cloudnativepg": {
            "enabled": True,
            "backup": {"destinationPath": "s3://starverse-backups/postgresql"},
        }
    }
}


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_postgresql_as_a_cloudnativepg_cluster_with_continuous_backups(kube_version):
    """docs/operator-guide.md "Backups and restore": three instances on three nodes, WAL
    archived and a daily base backup through the Barman Cloud plugin to the object store, the
    platform's DATABASE_URL from the operator's Secret, and the migrations after the Cluster
    exists on a first install (before the rollout on an upgrade)."""
    report = helm.lint(CHART, CNPG, strict=True, namespace=NAMESPACE, kube_version="v1.30.0")
    assert (report["errors"], [m for m in report["messages"] if m["severity"] >= 2]) == ([], [])
    docs = render(CNPG)
    for doc in docs:
        if doc["kind"] not in CRD_KINDS:
            kubernetes_validate.validate(doc, kube_version, strict=True)
    (cluster,) = by_kind(docs, "Cluster").values()
    assert cluster["apiVersion"] == "postgresql.cnpg.io/v1"
    assert cluster["spec"]["instances"] == 3
    assert cluster["spec"]["affinity"]["podAntiAffinityType"] == "required"
    (plugin,) = cluster["spec"]["plugins"]
    assert (plugin["name"], plugin["isWALArchiver"]) == ("barman-cloud.cloudnative-pg.io", True)
    store = by_kind(docs, "ObjectStore")[plugin["parameters"]["barmanObjectName"]]
    assert store["spec"]["configuration"]["destinationPath"] == "s3://starverse-backups/postgresql"
    assert store["spec"]["retentionPolicy"] == "30d"
    (backup,) = by_kind(docs, "ScheduledBackup").values()
    assert backup["spec"]["cluster"] == {"name": cluster["metadata"]["name"]}
    assert backup["spec"]["method"] == "plugin"
    assert len(backup["spec"]["schedule"].split()) == 6  # CloudNativePG's cron has seconds

    app_secret = {"secretKeyRef": {"name": "starverse-pg-app", "key": "uri"}}
    for doc in [*by_kind(docs, "Deployment").values(), *by_kind(docs, "Job").values()]:
        assert env_of(doc)["DATABASE_URL"] == app_secret, doc["metadata"]["name"]
    job = by_kind(docs, "Job")["migrate"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,pre-upgrade"
    assert "Cluster" not in {d["kind"] for d in render()}  # off by default: external PostgreSQL


def test_continuous_backups_need_a_destination():
    values: dict[str, Any] = {"postgresql": {"cloudnativepg": {"enabled": True}}}
    with pytest.raises(Exception, match="destinationPath is required"):
        render(values)
    values["postgresql"]["cloudnativepg"]["backup"] = {"enabled": False}
    kinds = {d["kind"] for d in render(values)}
    assert "Cluster" in kinds and not kinds & {"ObjectStore", "ScheduledBackup"}


def test_rollouts_keep_capacity_and_let_work_finish():
    """docs/operator-guide.md "Upgrades": a web pod leaves the Service before gunicorn stops
    and has its graceful timeout after; a worker is given its tasks' time limit and more."""
    docs = render(production_values())
    deployments = by_kind(docs, "Deployment")
    web, worker = deployments["web"], deployments["worker"]
    for doc in (web, worker):
        assert doc["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = web["spec"]["template"]["spec"]
    command = container(web)["command"]
    graceful = int(command[command.index("--graceful-timeout") + 1])
    (sleep, pause) = container(web)["lifecycle"]["preStop"]["exec"]["command"]
    assert sleep == "sleep" and int(pause) >= 5
    assert pod["terminationGracePeriodSeconds"] > int(pause) + graceful
    assert by_kind(docs, "PodDisruptionBudget")["web"]["spec"]["minAvailable"] >= 1
    limit = int(env_of(worker)["CELERY_TASK_TIME_LIMIT"])
    assert worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > limit > 0


def test_the_web_keeps_idle_connections_past_the_agents_period_and_the_ingresss_timeout():
    """An idle connection outlives the node agents' 15 s between reports (each reuses its own)
    and ingress-nginx's 60 s upstream idle timeout (the proxy closes first, never racing
    gunicorn's close with its next request: a 502)."""
    command = container(by_kind(render(production_values()), "Deployment")["web"])["command"]
    keep_alive = int(command[command.index("--keep-alive") + 1])
    assert keep_alive > 60 > 15


def test_a_point_in_time_recovery_bootstraps_a_new_cluster_from_the_old_ones_backups():
    values = {
        "postgresql": {
            "cloudnativepg": {
                "enabled": True,
                "name": "starverse-pg-2",
                "backup": {"destinationPath": "s3://starverse-backups/postgresql-2"},
                "recovery": {
                    "fromCluster": "starverse-pg",
                    "targetTime": "2026-12-03T09:00:00+08:00",
                },
            }
        }
    }
    (cluster,) = by_kind(render(values), "Cluster").values()
    assert cluster["spec"]["bootstrap"] == {
        "recovery": {
            "source": "origin",
            "recoveryTarget": {"targetTime": "2026-12-03T09:00:00+08:00"},
        }
    }
    (origin,) = cluster["spec"]["externalClusters"]
    assert origin["plugin"]["parameters"] == {
        "barmanObjectName": "starverse-pg-backups",
        "serverName": "starverse-pg",
    }
