"""Query-count baselines for the hot lists and pages: the number of queries a page costs does not
grow with its rows (no N+1), and equals the baseline recorded here, so a change that adds a
query per page has to say so by changing the number."""

from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from storage.disks import disk_create
from tests.factories import fund, make_operator, make_token, make_user, staff_login

# Queries per request, whatever the number of rows on the page.
BASELINE = {
    "/api/v1/instances": 4,  # token, page with its total, attached disks, queue positions
    "/api/v1/disks": 4,
    "/api/v1/billing/ledger": 3,
    "/api/v1/offerings": 5,  # with the regions where each offering's GPU model is
    # every console page reads the person's teams once, for the switch at the top
    "/console/instances/": 5,
    # with the trial's state (the banner of an unverified address), what auto-stop saved this
    # month and the recent transactions (a day's usage of one subject grouped into a line: the
    # lines, then their postings); nothing runs here, so no spend, running rows or idle banners
    # (tests/console/test_dashboard_queries.py counts them with instances running)
    "/console/": 9,
    # the transactions' lines are counted, then read as on the dashboard; the wallet and the
    # invoice details read once each
    "/billing/": 18,
    # with the regions (a disk's, and the new-disk form's choice), the wallet that pays and the
    # tenant's billed images in the day's storage total
    "/console/disks/": 14,
    "/admin/fleet/node/": 13,  # with the region filter's choices
}


def _order(client: APIClient, offering: Any, image: Any) -> dict[str, Any]:
    answer = client.post(
        "/api/v1/instances", {"offering": offering.id, "image": image.id}, format="json"
    )
    assert answer.status_code == 202, answer.content
    return answer.json()


def _count(get: Callable[[], Any]) -> int:
    with CaptureQueriesContext(connection) as queries:
        answer = get()
    assert answer.status_code == 200, answer.content[:300]
    return len(queries)


@pytest.fixture
def tenant(catalog: dict[str, Any], settings: Any) -> dict[str, Any]:
    # one account with a dozen whole nodes, most of them queued: over the default limits
    settings.MAX_RUNNING_GPUS, settings.MAX_QUEUED_ORDERS = 200, 20
    user = make_user()
    fund(user, 100_000_000)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(user)[1]}")
    console = APIClient()
    console.force_login(user)
    staff = APIClient()
    staff_login(staff, make_operator())
    return {"user": user, "api": api, "console": console, "staff": staff, "catalog": catalog}


def _grow(tenant: dict[str, Any], rows: int) -> None:
    """`rows` more instances (one placed, the rest queued behind it: a queued row has a queue
    position to compute), disks and ledger rows."""
    catalog, api, user = tenant["catalog"], tenant["api"], tenant["user"]
    for _ in range(rows):
        _order(api, catalog["a100_node"], catalog["image"])
        disk_create(user=user, name=f"d{user.tenant.disks.count()}", size_gb=10)


def _count_get(tenant: dict[str, Any], path: str) -> int:
    return _count(lambda: _client_for(tenant, path).get(path))


def _client_for(tenant: dict[str, Any], path: str) -> APIClient:
    if path.startswith("/api/"):
        return tenant["api"]
    return tenant["staff"] if path.startswith("/admin/") else tenant["console"]


def test_hot_lists_cost_the_same_queries_for_two_rows_as_for_twelve(tenant):
    _grow(tenant, 2)
    few = {path: _count_get(tenant, path) for path in BASELINE}
    _grow(tenant, 10)
    many = {path: _count_get(tenant, path) for path in BASELINE}
    assert many == few
    assert many == BASELINE
