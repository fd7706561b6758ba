"""clusters.gates: opening a cluster's gates checks first that the cluster is still there."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from clusters.gates import gates_open
from clusters.models import Cluster


def test_a_deleted_clusters_gates_open_does_nothing_and_raises_nothing(db):
    """The task that opens the gates may run after its cluster was deleted: it asks whether
    the cluster exists, and no more (no rank listed, no exec sent, no round marked)."""
    with CaptureQueriesContext(connection) as queries:
        assert gates_open("clu_gone") == 0

    assert len(queries) == 1
    assert f'FROM "{Cluster._meta.db_table}"' in queries[0]["sql"]
