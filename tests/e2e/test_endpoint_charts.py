"""An endpoint's page draws its last hour as charts, as the instance page does (the same
chart code): requests/s, latency p50 and p99, tokens/s and replicas ready, each with its
latest reading; the table stays one click away. At 1280 px in Chinese and in English nothing
is wider than the window. Screenshots: var/screenshots/endpoint-charts-<lang>.png."""

from datetime import timedelta
from pathlib import Path

from django.utils import timezone
from playwright.sync_api import Page, expect

from endpoints.manifests import route_hostname
from endpoints.metrics import samples_record
from tests.e2e.steps import fits, log_in
from tests.factories import make_endpoint, make_user

SHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"


def test_the_endpoint_page_charts_its_last_hour(page: Page, lang, live_server, catalog):
    user = make_user()
    endpoint = make_endpoint(user, min_replicas=0, max_replicas=2)
    host = route_hostname(endpoint.id)
    start = timezone.now() - timedelta(minutes=20)
    for minute in range(20):  # a load that rises: 20 one-minute samples
        samples_record(
            {
                host: {
                    "requests": 60 * (minute + 1),
                    "tokens": 3000 * (minute + 1),
                    "latencies_ms": [250.0] * 98 + [900.0, 1200.0],
                }
            },
            seconds=60,
            now=start + timedelta(minutes=minute),
        )
    log_in(page, live_server.url, user.email)

    page.goto(f"{live_server.url}/console/endpoints/{endpoint.id}/")

    charts = page.locator("#charts")
    expect(charts).to_be_visible()
    expect(charts.locator(".chart svg")).to_have_count(4)
    latency = charts.locator('.chart[data-metric="ep_latency"] .chart-legend li')
    expect(latency).to_have_count(2)
    expect(latency.nth(0)).to_contain_text("250 ms")
    expect(latency.nth(1)).to_contain_text("900 ms")  # p99 of the last sample (nearest rank)
    expect(charts.locator('.chart[data-metric="ep_requests"] .chart-legend')).to_contain_text(
        "20 /s"
    )
    expect(charts.locator('.chart[data-metric="ep_tokens"] .chart-legend')).to_contain_text(
        "1000 /s"
    )
    table = page.locator("#series-table")
    expect(table).not_to_have_attribute("open", "")
    expect(table.locator("tbody tr")).to_have_count(20)
    fits(page)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"endpoint-charts-{lang}.png"), full_page=True)


def _y_ticks(page: Page, metric: str) -> list[str]:
    """The value axis' labels of a chart, bottom up."""
    return page.locator(f'.chart[data-metric="{metric}"] .chart-tick-y').all_text_contents()


def test_count_charts_have_whole_number_ticks(page: Page, lang, live_server, catalog):
    """Replicas and requests are counts: their axes read 0 1 2…, never 1.3 / 2.5 / 3.8."""
    user = make_user()
    endpoint = make_endpoint(user, min_replicas=0, max_replicas=2)
    type(endpoint).objects.filter(pk=endpoint.pk).update(replicas_ready=2)
    start = timezone.now() - timedelta(minutes=4)
    for minute in range(4):  # 1, 2, 3 and 4 requests a second
        samples_record(
            {route_hostname(endpoint.id): {"requests": 60 * (minute + 1), "tokens": 0}},
            seconds=60,
            now=start + timedelta(minutes=minute),
        )
    log_in(page, live_server.url, user.email)

    page.goto(f"{live_server.url}/console/endpoints/{endpoint.id}/")

    expect(page.locator("#charts .chart svg")).to_have_count(4)
    assert _y_ticks(page, "ep_requests") == ["0", "1", "2", "3", "4"]
    assert _y_ticks(page, "ep_replicas") == ["0", "1", "2"]
    assert _y_ticks(page, "ep_tokens") == ["0", "1"]  # none generated: one step up to 1
