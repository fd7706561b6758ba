import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from terminal.app import application


@pytest.fixture(scope="session")
def terminal_service() -> Iterator[str]:
    """The web terminal service (terminal.app) served by uvicorn in a thread, as `bin/run`
    serves it: its base URL, ws://127.0.0.1:<port>."""
    server = uvicorn.Server(
        uvicorn.Config(
            application,
            host="127.0.0.1",
            port=0,
            lifespan="on",
            log_level="warning",
            ws="websockets-sansio",
        )
    )
    thread = threading.Thread(target=server.run, name="terminal-service", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the terminal service did not start"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"ws://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


# Other sessions on the test database still in a transaction or running a query: the terminal
# service's threads, finishing a session the test has closed (its last check, its close).
_BUSY_ELSEWHERE = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND pid <> pg_backend_pid() AND state IN ('active', 'idle in transaction')"
)


@pytest.fixture(autouse=True)
def _service_done_before_the_flush(request: pytest.FixtureRequest) -> Iterator[None]:
    """A transactional test's database is emptied by TRUNCATE after it; the terminal service,
    which outlives the test, may still be finishing a session's last check then, and the two
    can deadlock. Set up after the database (so torn down before its flush), this waits up to
    30 s (a busy CI machine) for the service's queries to end."""
    if "transactional_db" not in request.fixturenames:
        yield
        return
    request.getfixturevalue("transactional_db")
    yield
    from django.db import connection

    deadline = time.monotonic() + 30
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(_BUSY_ELSEWHERE)
            if cursor.fetchone()[0] == 0:
                return
            time.sleep(0.05)
