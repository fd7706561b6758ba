"""Two reports of a node's new inventory at once (its first report and the agent's retry after a
timeout, taken by two gunicorn workers): the second waits for the first and finds the GPUs it
created, instead of inserting them again and failing on the GPUs' unique uuid (an HTTP 500 the
agent sees as a lost report; seen under `make run` on a loaded machine)."""

import threading

import pytest
from django.db import connection, transaction

from fleet import services
from fleet.models import Gpu, Node
from fleet.services import health_rules_ensure_defaults, report_ingest
from fleet.telemetry import report_parse
from tests.conftest import run_threads
from tests.fleet.test_fleet import H100, _report

# Another session of the test database waiting for a lock: the second report, held.
_WAITING = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
)


@pytest.mark.django_db(transaction=True)
def test_two_first_reports_of_a_node_at_once_both_store_and_create_its_gpus_once():
    health_rules_ensure_defaults()
    node = Node.objects.create(
        name="gpu-h100-01", gpu_product=H100, gpu_count=8, gpu_memory_mb=81559
    )
    first_in, go_on = threading.Event(), threading.Event()

    def report(index: int) -> int:
        if index == 0:
            with transaction.atomic():  # the first worker's report, not yet committed
                stored = report_ingest(
                    node=node, report=report_parse(_report(), node_name=node.name)
                )
                first_in.set()
                assert go_on.wait(timeout=20)
            return stored
        assert first_in.wait(timeout=20)
        services._GPU_MAP.clear()  # another worker: it has not the first one's process cache
        return report_ingest(node=node, report=report_parse(_report(), node_name=node.name))

    def release_when_the_second_waits() -> None:
        for _ in range(400):
            with connection.cursor() as cursor:
                cursor.execute(_WAITING)
                if cursor.fetchone()[0]:
                    break
            threading.Event().wait(0.05)
        go_on.set()
        connection.close()

    releaser = threading.Thread(target=release_when_the_second_waits)
    releaser.start()
    results = run_threads(2, report)
    releaser.join(timeout=30)

    assert results == [8, 8]
    assert Gpu.objects.filter(node=node).count() == 8
