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
