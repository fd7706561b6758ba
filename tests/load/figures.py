"""make load's arithmetic: percentiles, the agents' log (tests/load/fleet.py writes it) and
gunicorn's access log, read by stage. Kept apart from the locustfile, whose import patches the
process for gevent."""

from datetime import datetime
from pathlib import Path
from typing import Any

AGENT_ROUTE = "POST /api/v1/nodes/[name]/report"
# gunicorn's own time for each request (from its parse to the last byte), and when it ended
ACCESS_FORMAT = "%(t)s %(L)s"


def percentile(times: list[float], q: float) -> float:
    """The q-th quantile of times (0 when there are none), as make load reports it."""
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def fleet_window(log: Path, since: float, until: float) -> tuple[list[float], dict[str, int]]:
    """The agents' reports answered in [since, until) on the wall clock: their times in ms, and
    the failed ones counted by kind (an answer outside 2xx/3xx, or the exception's class)."""
    times: list[float] = []
    errors: dict[str, int] = {}
    with log.open() as lines:
        for line in lines:
            at, ms, status = line.split()
            if since <= float(at) < until:
                times.append(float(ms))
                if not (status.isdigit() and 200 <= int(status) < 400):
                    kind = f"{AGENT_ROUTE}: {status}"
                    errors[kind] = 1 + errors.get(kind, 0)
    return times, errors


def server_side(stage: dict[str, Any], access_log: Path) -> str:
    """The stage's requests as gunicorn timed them: the platform's share of what the clients
    timed (the wait before gunicorn parses a request is outside it)."""
    times = []
    for line in access_log.read_text().splitlines():
        stamp, _, seconds = line.rpartition(" ")
        at = datetime.strptime(stamp.strip("[]"), "%d/%b/%Y:%H:%M:%S %z").timestamp()
        if stage["from_epoch"] <= at < stage["until_epoch"]:
            times.append(float(seconds) * 1000)
    if not times:
        return f"{stage['people']} people: no request logged"
    p50, p99 = percentile(times, 0.5), percentile(times, 0.99)
    return f"{stage['people']} people: {len(times)} requests, p50 {p50:.0f} ms, p99 {p99:.0f} ms"
