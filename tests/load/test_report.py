"""make load's own arithmetic: gunicorn's time for a stage's requests, read from its access log."""

from datetime import UTC, datetime

from tests.load.figures import fleet_window, server_side


def _line(at: datetime, seconds: float) -> str:
    return f"[{at.strftime('%d/%b/%Y:%H:%M:%S %z')}] {seconds:.6f}"


def test_a_stage_counts_only_the_requests_answered_in_its_window(tmp_path):
    start = datetime(2026, 12, 5, 8, 0, 0, tzinfo=UTC)
    log = tmp_path / "access.log"
    inside = [0.004] * 98 + [0.120, 0.300]  # 100 requests: p50 4 ms, p99 300 ms
    lines = [_line(start.replace(second=5), 9.0)]  # before the window: not counted
    lines += [_line(start.replace(second=10 + i % 30), s) for i, s in enumerate(inside)]
    lines += [_line(start.replace(second=45), 9.0)]  # after it
    log.write_text("\n".join(lines) + "\n")
    stage = {
        "people": 100,
        "from_epoch": start.timestamp() + 10,
        "until_epoch": start.timestamp() + 45,
    }
    assert server_side(stage, log) == "100 people: 100 requests, p50 4 ms, p99 300 ms"


def test_a_stage_without_a_logged_request_says_so(tmp_path):
    log = tmp_path / "access.log"
    log.write_text("")
    assert server_side({"people": 0, "from_epoch": 0, "until_epoch": 1}, log) == (
        "0 people: no request logged"
    )


def test_the_agents_reports_of_a_window_and_their_failures_by_kind(tmp_path):
    log = tmp_path / "fleet.log"
    log.write_text(
        "99.9 7.00 202\n"  # before the window
        "100.0 5.00 202\n"
        "120.5 12.50 500\n"
        "130.0 30001.00 TimeoutError\n"
        "150.0 4.00 202\n"  # at its end: the next window's
    )
    times, errors = fleet_window(log, 100.0, 150.0)
    assert times == [5.0, 12.5, 30001.0]
    assert errors == {
        "POST /api/v1/nodes/[name]/report: 500": 1,
        "POST /api/v1/nodes/[name]/report: TimeoutError": 1,
    }
