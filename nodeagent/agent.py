"""The agent loop: sample the source every `interval` seconds, hand the report to the reporter,
and let the reporter deliver (or retry) in between. One thread; the clock and the wait are
injectable so the loop can be driven in tests."""

import logging
import threading
import time
from collections.abc import Callable

from nodeagent.exporter import GpuCollector
from nodeagent.report import PendingReport, Reporter, pending_report
from nodeagent.source import GpuSource

log = logging.getLogger(__name__)


class Agent:
    def __init__(
        self,
        source: GpuSource,
        reporter: Reporter,
        *,
        interval: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
        exporter: GpuCollector | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.source = source
        self.reporter = reporter
        self.interval = interval
        self._clock = clock
        self.exporter = exporter
        self.cycles = 0

    def collect(self) -> PendingReport:
        """Sample once and queue the report."""
        snapshot = self.source.sample()
        events = self.source.events()
        inventory = self.source.inventory()
        report = pending_report(self.source.driver(), inventory, snapshot, events)
        if self.exporter is not None:
            pods = getattr(self.source, "gpu_pods", None)
            self.exporter.update(inventory, snapshot, pods() if pods else None)
        self.reporter.submit(report)
        self.cycles += 1
        return report

    def run(self, stop: threading.Event, *, cycles: int | None = None) -> None:
        """Sample and report until `stop` is set (or after `cycles` samples)."""
        next_sample = self._clock()
        while not stop.is_set():
            now = self._clock()
            if now >= next_sample:
                try:
                    self.collect()
                except Exception:
                    log.exception("sampling failed; trying again next interval")
                next_sample += self.interval
                if next_sample <= now:  # fell behind (a slow POST, a suspended VM): skip ahead
                    next_sample = now + self.interval
            if self.reporter.due():
                try:
                    self.reporter.flush()
                except Exception:
                    log.exception("delivering reports failed; keeping them for the next try")
                    self.reporter.next_attempt = self._clock() + self.interval
            if cycles is not None and self.cycles >= cycles:
                return
            wake = next_sample
            if self.reporter.pending:
                wake = min(wake, self.reporter.next_attempt)
            stop.wait(max(0.0, wake - self._clock()))
        if cycles is None and self.reporter.due():  # stopping: one last try for the backlog
            try:
                self.reporter.flush()
            except Exception:
                log.exception("delivering reports failed while stopping")

    def run_once(self, *, attempts: int = 3, sleep: Callable[[float], None] = time.sleep) -> bool:
        """Sample once and deliver, retrying up to `attempts` times; True once delivered."""
        self.collect()
        for attempt in range(attempts):
            if attempt:
                sleep(max(0.0, self.reporter.next_attempt - self._clock()))
            delivered = self.reporter.flush()
            if not self.reporter.pending:
                return delivered > 0
        return False
