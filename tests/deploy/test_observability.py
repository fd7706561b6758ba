"""The dashboards (deploy/grafana/*.json) and alert rules (deploy/prometheus/alerts.yaml) load,
and every metric name in their expressions is one the code exports: the platform's, read from
a scrape of /metrics, and the node agents' DCGM names."""

import json
import re
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.metrics import METRICS

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "deploy" / "grafana").glob("*.json"))
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"

KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "inf",
    "nan",
}
SUFFIXES = {
    "counter": ("_total",),
    "summary": ("_sum", "_count"),
    "histogram": ("_sum", "_count", "_bucket"),
}


def metric_names(expr: str) -> set[str]:
    """The metric names of a PromQL expression, roughly: without strings, label matchers,
    grouping clauses, ranges, Grafana variables and function names."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\$\{?\w+\}?", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?", text):
        if match.group(2) or match.group(1).lower() in KEYWORDS:
            continue
        names.add(match.group(1))
    return names


def test_the_expression_parser_finds_names_and_skips_the_rest():
    expr = (
        'sum by (gpu_model) (rate(starverse_orders_total{gpu_model=~"$gpu_model"}[5m])) '
        "/ clamp_min(sum(rate(starverse_x_count[5m])), 1e-9) > 0 or DCGM_FI_DEV_GPU_TEMP"
    )
    assert metric_names(expr) == {
        "starverse_orders_total",
        "starverse_x_count",
        "DCGM_FI_DEV_GPU_TEMP",
    }


@pytest.fixture
def exported(db, client, settings):
    """Every sample name /metrics can serve (families are listed even with no rows yet)."""
    settings.DEBUG = True
    settings.METRICS_TOKEN = ""
    settings.METRICS_ALLOWED_CIDRS = []
    text = client.get("/metrics").content.decode()
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(family.name + s for s in SUFFIXES.get(family.type, ("",)))
    names.update(metric.name for metric in METRICS)
    return names


def _expressions() -> list[tuple[str, str]]:
    found = []
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                found.append((f"{path.name}: {panel['title']}", target["expr"]))
        for variable in dashboard["templating"]["list"]:
            if variable["type"] == "query":  # label_values(<metric>, <label>)
                metric = re.fullmatch(r"label_values\((\w+), *\w+\)", variable["definition"])
                assert metric, variable["definition"]
                found.append((f"{path.name}: ${variable['name']}", metric.group(1)))
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            found.append((f"alerts.yaml: {rule['alert']}", rule["expr"]))
    return found


def test_dashboards_and_alerts_load_with_what_operators_need():
    assert {p.stem for p in DASHBOARDS} == {"fleet", "business", "provisioning"}
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        assert dashboard["uid"] == f"starverse-{path.stem}"
        ids = [panel["id"] for panel in dashboard["panels"]]
        assert len(ids) == len(set(ids))
    alerts = {r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]}
    assert {
        "StarverseNodeDown",
        "StarverseQueueWaitHigh",
        "StarverseWebhookFailures",
        "StarverseLedgerAuditDrift",
        "StarverseProvisioningFailures",
    } <= alerts


def test_every_expression_uses_only_exported_metric_names(exported):
    unknown = {
        (where, name)
        for where, expr in _expressions()
        for name in metric_names(expr)
        if name not in exported
    }
    assert unknown == set()
    used = {name for _where, expr in _expressions() for name in metric_names(expr)}
    assert {"DCGM_FI_DEV_GPU_UTIL", "starverse_queue_wait_seconds_max"} <= used
