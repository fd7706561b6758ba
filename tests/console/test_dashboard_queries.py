"""The dashboard's queries (issue 31, load): one aggregate gives the running instances' count
and GPUs; with nothing running the spend, the first rows and the idle warnings are not asked
for; with instances running the count stays the same whatever their number."""

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tests.factories import fund, make_instance, make_user

# session, user, wallet, the recent lines (their groups, then their postings), the running
# instances' count and GPUs, the trial's state, auto-stop's savings, the teams for the switch
NOTHING_RUNNING = 9
# and the spend per hour, the first running rows and the idle warnings
SOME_RUNNING = NOTHING_RUNNING + 3


def _queries(client: Client) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as queries:
        answer = client.get("/console/")
    assert answer.status_code == 200
    return len(queries), answer.content.decode()


@pytest.mark.django_db
def test_the_dashboard_with_nothing_running_skips_what_would_be_empty():
    user = make_user()
    client = Client()
    client.force_login(user)
    _queries(client)  # warm: what a process caches once

    count, page = _queries(client)

    assert count == NOTHING_RUNNING
    assert "Nothing is running, so nothing is charged" in page
    assert "No instances running" in page


def test_the_dashboard_costs_the_same_queries_for_one_running_instance_as_for_three(
    catalog, settings
):
    settings.MAX_RUNNING_GPUS = 64
    user = make_user()
    fund(user, 10_000_000)
    first = make_instance(user, "running")
    client = Client()
    client.force_login(user)
    _queries(client)

    one, page_one = _queries(client)
    more = [make_instance(user, "running") for _ in range(2)]
    three, page_three = _queries(client)

    assert one == three == SOME_RUNNING
    assert f"/console/instances/{first.id}/" in page_one
    assert '<div class="stat-value">3</div>' in page_three  # the running count
    assert all(f"/console/instances/{i.id}/" in page_three for i in [first, *more])
