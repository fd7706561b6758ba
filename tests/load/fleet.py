"""The node agents of `make load`: every node of LOAD_DATA reports every 15 s with its node token,
as nodeagent/report.py does, from one gevent process, each report timed and written as a line
`<epoch> <ms> <status>` to the file named; it runs until stopped. Locust's stages read the lines
of their window (tests/load/locustfile.py), so each stage's figures count the agents' reports.

The agents run here and not as Locust users: at 1,024 users Locust's own process adds tens of ms
to every request it times, whatever the server (docs/capacity.md measures it against an app that
answers at once: p50 19-53 ms from Locust, 0.7-0.9 ms from this loop).

    python -m tests.load.fleet DATA_JSON BASE_URL OUT_FILE"""

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from typing import Any, TextIO  # noqa: E402

import gevent  # noqa: E402
from geventhttpclient import HTTPClient  # noqa: E402

from tests.load.report import node_report  # noqa: E402

PERIOD_S = 15.0


def agent(node: dict[str, str], base_url: str, out: TextIO) -> None:
    client = HTTPClient.from_url(base_url, concurrency=1, network_timeout=30)
    path = f"/api/v1/nodes/{node['name']}/report"
    headers = {"Authorization": f"Bearer {node['token']}", "Content-Type": "application/json"}
    gevent.sleep(random.uniform(0, PERIOD_S))  # agents started at different moments
    while True:
        body = json.dumps(node_report(node["name"])).encode()
        started = time.perf_counter()
        status: Any
        try:
            response = client.post(path, body=body, headers=headers)
            response.read()
            status = response.status_code
        except Exception as exc:
            status = type(exc).__name__
        elapsed = time.perf_counter() - started
        out.write(f"{time.time():.3f} {elapsed * 1000:.2f} {status}\n")
        gevent.sleep(max(0.0, PERIOD_S - elapsed))


def main(argv: list[str]) -> None:
    data, base_url, out_path = argv
    with open(data) as handle:
        nodes = json.load(handle)["nodes"]
    with open(out_path, "a", buffering=1) as out:  # a line at a time: the stages read it live
        gevent.joinall([gevent.spawn(agent, node, base_url, out) for node in nodes])


if __name__ == "__main__":
    main(sys.argv[1:])
