"""make load's arithmetic on the agents' log (tests/load/fleet.py writes it): kept apart from
the locustfile, whose import patches the process for gevent."""

from pathlib import Path

AGENT_ROUTE = "POST /api/v1/nodes/[name]/report"


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
