"""The reporter against a tiny local platform on 127.0.0.1: contract, bearer token, backoff,
backlog order, bounded buffer, final answers."""

import logging
import re
import threading
from typing import Any

import pytest

from nodeagent import AGENT_VERSION
from nodeagent.agent import Agent
from nodeagent.fixture import open_fixture_source
from nodeagent.metrics import METRIC_NAMES
from nodeagent.report import PendingReport, Reporter, build_report, report_url
from tests.nodeagent import FIXTURES, FakeMonotonic, FakePlatform, FixedClock, free_port, serving

NODE = "gpu-h100-01"
TOKEN = "svn_0123456789abcdefghijABCDEFGHIJ4bXz9Q"
SENT_AT = "2026-11-29T21:30:00Z"


def pending(at: str, events: list[Any] | None = None) -> PendingReport:
    return PendingReport(
        driver={"driver_version": "550.54.15", "cuda_version": "12.4", "nvml_version": "12.550"},
        inventory=[],
        samples=[{"at": at, "gpus": []}],
        events=events or [],
        lost_gpus=[],
    )


def reporter(url: str, clock: FakeMonotonic, **options: Any) -> Reporter:
    options.setdefault("jitter", lambda delay: delay)
    options.setdefault("timeout", 2.0)
    return Reporter(url, NODE, TOKEN, clock=clock, now=lambda: SENT_AT, **options)


def ats(body: dict[str, Any]) -> list[str]:
    return [sample["at"] for sample in body["samples"]]


def test_report_sends_bearer_token_and_the_contract_shape() -> None:
    source = open_fixture_source(FIXTURES / "h100_xid79.json", strict=True, clock=FixedClock())
    with serving(FakePlatform()) as platform:
        sender = reporter(platform.url, FakeMonotonic())
        agent = Agent(source, sender, interval=15)
        agent.collect()
        assert sender.flush() == 1

    assert len(platform.requests) == 1
    request = platform.requests[0]
    assert request["path"] == "/api/v1/nodes/gpu-h100-01/report"
    assert request["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert request["headers"]["Content-Type"] == "application/json"
    body = request["body"]
    assert list(body) == [
        "agent_version",
        "node",
        "sent_at",
        "driver",
        "inventory",
        "samples",
        "events",
        "lost_gpus",
        "dropped_reports",
    ]
    assert body["agent_version"] == AGENT_VERSION == "0.1.0"
    assert body["node"] == NODE
    assert body["sent_at"] == SENT_AT
    assert body["driver"] == {
        "driver_version": "550.54.15",
        "cuda_version": "12.4",
        "nvml_version": "12.550.54.15",
    }
    assert len(body["inventory"]) == 8
    assert list(body["inventory"][0]) == [
        "index",
        "uuid",
        "pci_bus_id",
        "product",
        "serial",
        "vbios",
        "memory_total_mb",
        "nvlink_links",
    ]
    assert len(body["samples"]) == 1
    assert body["samples"][0]["at"] == "2026-11-29T21:00:15Z"
    gpus = body["samples"][0]["gpus"]
    assert len(gpus) == 8
    assert list(gpus[0]) == ["index", "uuid", "metrics"]
    for gpu in gpus:
        assert list(gpu["metrics"]) == list(METRIC_NAMES)
        assert all(
            value is None or (isinstance(value, int | float) and not isinstance(value, bool))
            for value in gpu["metrics"].values()
        )
    assert body["events"] == [
        {
            "at": "2026-11-29T21:00:15Z",
            "type": "xid",
            "gpu": 3,
            "uuid": "GPU-f162bd34-57bf-31cc-5e93-b45c039ea952",
            "xid": 79,
            "message": "XID 79: GPU has fallen off the bus",
        }
    ]
    assert body["lost_gpus"] == []
    assert body["dropped_reports"] == 0
    for stamp in [body["sent_at"], body["samples"][0]["at"], body["events"][0]["at"]]:
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp)


def test_retries_503_with_backoff_then_delivers_the_backlog_oldest_first() -> None:
    clock = FakeMonotonic()
    with serving(FakePlatform([503, 503])) as platform:
        sender = reporter(platform.url, clock)
        sender.submit(pending("2026-11-29T21:00:00Z"))
        assert sender.flush() == 0
        assert sender.last_delay == 1.0
        assert sender.flush() == 0  # not due yet: no request
        assert len(platform.requests) == 1

        clock.advance(1.0)
        sender.submit(pending("2026-11-29T21:00:15Z"))
        assert sender.flush() == 0
        assert sender.last_delay == 2.0
        assert len(platform.requests) == 2

        clock.advance(1.9)
        sender.submit(pending("2026-11-29T21:00:30Z"))
        assert sender.flush() == 0
        assert len(platform.requests) == 2

        clock.advance(0.1)
        assert sender.flush() == 3
        assert sender.pending == 0
        assert sender.failures == 0

    bodies = platform.bodies()
    assert [ats(body) for body in bodies] == [
        ["2026-11-29T21:00:00Z"],
        ["2026-11-29T21:00:00Z", "2026-11-29T21:00:15Z"],
        ["2026-11-29T21:00:00Z", "2026-11-29T21:00:15Z", "2026-11-29T21:00:30Z"],
    ]


def test_connection_refused_is_retried_and_the_backlog_sent_on_recovery() -> None:
    clock = FakeMonotonic()
    port = free_port()
    sender = reporter(f"http://127.0.0.1:{port}", clock)
    sender.submit(pending("2026-11-29T21:00:00Z"))
    sender.submit(pending("2026-11-29T21:00:15Z"))
    assert sender.flush() == 0
    assert sender.last_delay == 1.0
    clock.advance(1.0)
    assert sender.flush() == 0
    assert sender.last_delay == 2.0
    sender.submit(pending("2026-11-29T21:00:30Z"))

    with serving(FakePlatform(port=port)) as platform:
        assert sender.flush() == 0  # still waiting out the 2 s
        clock.advance(2.0)
        assert sender.flush() == 3

    assert [ats(body) for body in platform.bodies()] == [
        ["2026-11-29T21:00:00Z", "2026-11-29T21:00:15Z", "2026-11-29T21:00:30Z"]
    ]


def test_backoff_doubles_up_to_the_cap() -> None:
    clock = FakeMonotonic()
    delays = []
    with serving(FakePlatform([503] * 9)) as platform:
        sender = reporter(platform.url, clock, backoff_initial=1.0, backoff_max=60.0)
        sender.submit(pending("2026-11-29T21:00:00Z"))
        for _ in range(9):
            sender.flush()
            delays.append(sender.last_delay)
            clock.advance(sender.last_delay or 0)
        assert sender.flush() == 1
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    assert len(platform.requests) == 10


def test_jitter_stays_between_half_and_the_full_delay() -> None:
    clock = FakeMonotonic()
    sender = Reporter(f"http://127.0.0.1:{free_port()}", NODE, TOKEN, clock=clock)
    sender.submit(pending("2026-11-29T21:00:00Z"))
    for failures in range(1, 9):
        sender.flush()
        nominal = min(60.0, 2.0 ** (failures - 1))
        assert sender.last_delay is not None
        assert nominal / 2 <= sender.last_delay <= nominal
        clock.advance(sender.last_delay)


def test_429_honours_retry_after() -> None:
    clock = FakeMonotonic()
    with serving(FakePlatform([(429, {"Retry-After": "7"})])) as platform:
        sender = reporter(platform.url, clock)
        sender.submit(pending("2026-11-29T21:00:00Z"))
        assert sender.flush() == 0
        assert sender.last_delay == 7.0
        clock.advance(7.0)
        assert sender.flush() == 1
    assert len(platform.requests) == 2


def test_full_buffer_drops_the_oldest_and_counts_them() -> None:
    clock = FakeMonotonic()
    port = free_port()
    sender = reporter(f"http://127.0.0.1:{port}", clock, buffer_size=3)
    for second in range(5):
        sender.submit(pending(f"2026-11-29T21:00:0{second}Z"))
        sender.flush()
    assert sender.pending == 3
    assert sender.dropped_reports == 2

    with serving(FakePlatform(port=port)) as platform:
        clock.advance(60)
        assert sender.flush() == 3
    [body] = platform.bodies()
    assert ats(body) == ["2026-11-29T21:00:02Z", "2026-11-29T21:00:03Z", "2026-11-29T21:00:04Z"]
    assert body["dropped_reports"] == 2


def test_a_long_backlog_goes_in_several_posts_oldest_first() -> None:
    with serving(FakePlatform()) as platform:
        sender = reporter(platform.url, FakeMonotonic(), max_samples=2)
        for second in range(5):
            sender.submit(pending(f"2026-11-29T21:00:0{second}Z"))
        assert sender.flush() == 5
    assert [ats(body) for body in platform.bodies()] == [
        ["2026-11-29T21:00:00Z", "2026-11-29T21:00:01Z"],
        ["2026-11-29T21:00:02Z", "2026-11-29T21:00:03Z"],
        ["2026-11-29T21:00:04Z"],
    ]


def test_merged_reports_carry_every_event_and_the_newest_state() -> None:
    first = pending("2026-11-29T21:00:00Z", events=[{"type": "xid", "xid": 79}])
    second = pending("2026-11-29T21:00:15Z", events=[{"type": "xid", "xid": 48}])
    second.lost_gpus = [{"index": 5, "uuid": None, "pci_bus_id": None, "error": "GpuIsLost"}]
    body = build_report(NODE, [first, second], dropped_reports=4, sent_at=SENT_AT)
    assert [event["xid"] for event in body["events"]] == [79, 48]
    assert body["lost_gpus"] == second.lost_gpus
    assert body["dropped_reports"] == 4
    assert ats(body) == ["2026-11-29T21:00:00Z", "2026-11-29T21:00:15Z"]


def test_400_is_final_and_its_detail_logged(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeMonotonic()
    with serving(FakePlatform([400])) as platform:
        sender = reporter(platform.url, clock)
        sender.submit(pending("2026-11-29T21:00:00Z"))
        assert sender.flush() == 0
        clock.advance(120)
        assert sender.flush() == 0
    assert len(platform.requests) == 1
    assert sender.pending == 0
    assert sender.rejected_reports == 1
    assert sender.next_attempt == 0.0
    assert [r.getMessage() for r in caplog.records if r.name == "nodeagent.report"] == [
        "the platform refused a report (HTTP 400: samples[0].at: must be an ISO 8601 time "
        "with a time zone [invalid]); dropped"
    ]


def test_401_is_final_and_logged_loudly(caplog: pytest.LogCaptureFixture) -> None:
    with serving(FakePlatform([401])) as platform:
        sender = reporter(platform.url, FakeMonotonic())
        sender.submit(pending("2026-11-29T21:00:00Z"))
        assert sender.flush() == 0
        assert sender.flush() == 0
    assert len(platform.requests) == 1
    assert sender.pending == 0
    [record] = [r for r in caplog.records if r.name == "nodeagent.report"]
    assert record.levelno == logging.ERROR
    assert record.getMessage() == (
        "THE PLATFORM REFUSED THIS NODE'S TOKEN (HTTP 401: Invalid node token.): check the node "
        "token (--token-file/--token) and that node 'gpu-h100-01' is registered; report dropped"
    )


def test_a_refused_merged_batch_is_retried_one_report_at_a_time() -> None:
    clock = FakeMonotonic()
    with serving(FakePlatform([503, 400, 202, 400, 202])) as platform:
        sender = reporter(platform.url, clock)
        for second in range(3):
            sender.submit(pending(f"2026-11-29T21:00:0{second}Z"))
        sender.flush()
        clock.advance(1)
        assert sender.flush() == 2
    assert [ats(body) for body in platform.bodies()] == [
        ["2026-11-29T21:00:00Z", "2026-11-29T21:00:01Z", "2026-11-29T21:00:02Z"],
        ["2026-11-29T21:00:00Z", "2026-11-29T21:00:01Z", "2026-11-29T21:00:02Z"],
        ["2026-11-29T21:00:00Z"],
        ["2026-11-29T21:00:01Z"],
        ["2026-11-29T21:00:02Z"],
    ]
    assert sender.rejected_reports == 1
    assert sender.delivered_reports == 2


def test_a_redirect_is_not_followed() -> None:
    with serving(FakePlatform([(302, {"Location": "http://elsewhere.invalid/steal"})])) as platform:
        sender = reporter(platform.url, FakeMonotonic())
        sender.submit(pending("2026-11-29T21:00:00Z"))
        assert sender.flush() == 0
    assert len(platform.requests) == 1
    assert sender.pending == 0
    assert sender.rejected_reports == 1


def test_the_token_is_read_at_each_post(tmp_path: Any) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("svn_first\n")
    with serving(FakePlatform()) as platform:
        sender = Reporter(platform.url, NODE, lambda: token_file.read_text().strip())
        sender.submit(pending("2026-11-29T21:00:00Z"))
        sender.flush()
        token_file.write_text("svn_rotated\n")
        sender.submit(pending("2026-11-29T21:00:15Z"))
        sender.flush()
    assert [r["headers"]["Authorization"] for r in platform.requests] == [
        "Bearer svn_first",
        "Bearer svn_rotated",
    ]


def test_report_url() -> None:
    assert (
        report_url("https://cloud.example.com/", "gpu-h100-01")
        == "https://cloud.example.com/api/v1/nodes/gpu-h100-01/report"
    )
    assert (
        report_url("http://10.0.0.1:8000", "a/b")
        == "http://10.0.0.1:8000/api/v1/nodes/a%2Fb/report"
    )
    with pytest.raises(ValueError):
        report_url("file:///etc/passwd", "n")


def test_agent_loop_samples_and_delivers() -> None:
    source = open_fixture_source(FIXTURES / "h100_gpu_lost.json", strict=True)
    with serving(FakePlatform([503])) as platform:
        sender = Reporter(
            platform.url, NODE, TOKEN, backoff_initial=0.01, jitter=lambda delay: delay
        )
        agent = Agent(source, sender, interval=0.02)
        agent.run(threading.Event(), cycles=3)
        agent.run_once()
    bodies = platform.bodies()
    assert sum(len(body["samples"]) for body in bodies[1:]) == 4
    assert sender.pending == 0
    assert bodies[-1]["lost_gpus"] == [
        {"index": 5, "uuid": None, "pci_bus_id": None, "error": "GpuIsLost"}
    ]


def test_run_once_gives_up_after_its_attempts() -> None:
    source = open_fixture_source(FIXTURES / "h100_8x_healthy.json", strict=True)
    clock = FakeMonotonic()
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.advance(seconds)

    sender = reporter(f"http://127.0.0.1:{free_port()}", clock)
    agent = Agent(source, sender, interval=15, clock=clock)
    assert agent.run_once(attempts=3, sleep=sleep) is False
    assert sleeps == [1.0, 2.0]
    assert sender.pending == 1
