"""starverse.core.db.execute_prepared: the PREPARE is the connection's set-up, so a request's
queries are the same whether or not its connection had prepared the statement before."""

from django.db import connection
from django.test.utils import CaptureQueriesContext

from starverse.core.db import execute_prepared

SQL = "SELECT CAST(%(a)s AS integer) + CAST(%(b)s AS integer), CAST(%(text)s AS text)"


def _run(**params: object) -> list[tuple[object, ...]]:
    with connection.cursor() as cursor:
        execute_prepared(cursor, "sv_probe_setup", SQL, params)
        return cursor.fetchall()


def test_the_prepare_is_not_one_of_the_requests_queries(db):
    with CaptureQueriesContext(connection) as first:
        assert _run(a=1, b=2, text="a%b") == [(3, "a%b")]
    with CaptureQueriesContext(connection) as second:
        assert _run(a=40, b=2, text="it's") == [(42, "it's")]

    assert len(first) == len(second) == 1
    assert first[0]["sql"].startswith("EXECUTE sv_probe_setup_")
    assert second[0]["sql"].endswith("(40, 2, 'it''s')")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'sv_probe_setup%%'"
        )
        assert cursor.fetchone() == (1,)
