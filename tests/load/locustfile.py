"""Locust's side of `make load` (tests/load/__init__.py): the people. Reads LOAD_DATA (the JSON
the driver wrote: node names and tokens, API tokens, console session cookies, the offering to
order) and writes each stage's figures to LOAD_RESULTS when it quits. A stage's figures count
the node agents' reports too, read from LOAD_FLEET_LOG (tests/load/fleet.py sends them)."""

import json
import os
import random
import time
from pathlib import Path
from typing import Any

from locust import FastHttpUser, LoadTestShape, between, events, task

from tests.load.figures import fleet_window, percentile

with open(os.environ["LOAD_DATA"]) as _data:
    DATA = json.load(_data)
STAGE_S = float(os.environ.get("LOAD_STAGE_S", "45"))
START, STEP, MAX = (int(os.environ.get(k, d)) for k, d in
                    (("LOAD_START", "100"), ("LOAD_STEP", "100"), ("LOAD_MAX", "1500")))  # fmt: skip
NODES = len(DATA["nodes"])
STOP_P99_MS, HELD_P99_MS = 500.0, 200.0
# Answers the API documents for a busy account (no GPUs left for it, its queue full, its
# balance short): what a person gets, not a failure of the platform.
EXPECTED = {402, 409, 429}
stages: list[dict[str, Any]] = []


def _stage() -> dict[str, Any] | None:
    return stages[-1] if stages else None


def _kind(request_type: str, name: str, exception: Any) -> str:
    """An error's kind: the route as named (not its URL: one per node would list 1,024 kinds)
    and what went wrong (the status, or the exception's class)."""
    what = getattr(exception, "code", None) or type(exception).__name__
    return f"{request_type} {name}: {what}"


@events.request.add_listener
def _record(request_type: str, name: str, response_time: float, exception: Any, **_: Any) -> None:
    stage = _stage()
    if stage is not None and time.monotonic() >= stage["measure_from"]:
        stage["times"].append(response_time)
        if exception is not None:
            stage["errors"] += 1
            kind = _kind(request_type, name, exception)
            stage["error_kinds"][kind] = 1 + stage["error_kinds"].get(kind, 0)


def summary(stage: dict[str, Any]) -> dict[str, Any]:
    agents, agent_errors = fleet_window(
        Path(os.environ["LOAD_FLEET_LOG"]), stage["measure_from_epoch"], stage["ended_epoch"]
    )
    people = stage["times"]
    times, seconds = people + agents, max(1e-9, stage["ended"] - stage["measure_from"])
    kinds = {**stage["error_kinds"], **agent_errors}
    return {
        "people": stage["people"], "nodes": NODES, "requests": len(times),
        "rps": round(len(times) / seconds, 1), "p50_ms": round(percentile(times, 0.50)),
        "p95_ms": round(percentile(times, 0.95)), "p99_ms": round(percentile(times, 0.99)),
        "agents_p99_ms": round(percentile(agents, 0.99)), "people_p99_ms": round(percentile(people, 0.99)),
        "errors": stage["errors"] + sum(agent_errors.values()), "error_kinds": kinds,
        # the measured window on the wall clock, to find the stage's lines in gunicorn's log
        "from_epoch": stage["measure_from_epoch"], "until_epoch": stage["ended_epoch"],
    }  # fmt: skip


class Rising(LoadTestShape):
    """The node agents throughout (tests/load/fleet.py), and START people, then STEP more each
    STAGE_S seconds (measured after the first 10 s of each, once its people have arrived), until
    a stage's p99 passes 500 ms or a request failed, or MAX people."""

    def tick(self) -> tuple[int, float] | None:
        now = time.monotonic()
        stage = _stage()
        if stage is None or now - stage["started"] >= STAGE_S:
            if stage is not None:
                stage["ended"], stage["ended_epoch"] = now, time.time()
                result = summary(stage)
                shown = {k: v for k, v in result.items() if not k.endswith(("_kinds", "_epoch"))}
                print(f"stage: {json.dumps(shown)}", flush=True)
                broke = result["p99_ms"] > STOP_P99_MS or result["errors"]
                if (broke and not stage["warm_up"]) or stage["people"] >= MAX:
                    return None
            # first the agents alone: their first reports register 1,024 nodes' GPUs at once
            people = 0 if stage is None else START if stage["warm_up"] else stage["people"] + STEP
            stages.append({"people": people, "started": now, "measure_from": now + 10.0,
                           "measure_from_epoch": time.time() + 10.0,
                           "times": [], "errors": 0, "error_kinds": {},
                           "warm_up": stage is None})  # fmt: skip
        return stages[-1]["people"], 200.0


@events.quitting.add_listener
def _write(**_: Any) -> None:
    done = [summary(s) for s in stages if "ended" in s and not s["warm_up"]]
    with open(os.environ["LOAD_RESULTS"], "w") as handle:
        json.dump(done, handle)


class ApiUser(FastHttpUser):
    """A person's script polling the API, now and then ordering an instance and, a few minutes
    later, terminating it."""

    weight = 2
    wait_time = between(5, 15)

    def on_start(self) -> None:
        self.headers = {"Authorization": f"Bearer {random.choice(DATA['tokens'])}"}
        self.mine: list[tuple[str, float]] = []

    def _get(self, path: str, name: str | None = None) -> None:
        self.client.get(path, headers=self.headers, name=name or path)

    @task(10)
    def instances(self) -> None:
        self._get("/api/v1/instances")

    @task(4)
    def balance(self) -> None:
        self._get("/api/v1/billing/balance")

    @task(3)
    def one(self) -> None:
        if self.mine:
            self._get(f"/api/v1/instances/{self.mine[0][0]}", name="/api/v1/instances/[id]")

    @task(1)
    def order_or_stop(self) -> None:
        if self.mine and time.monotonic() - self.mine[0][1] > 120:
            instance, _ = self.mine.pop(0)
            self.client.delete(f"/api/v1/instances/{instance}", headers=self.headers,
                               name="/api/v1/instances/[id] DELETE")  # fmt: skip
        elif not self.mine and random.random() < 0.3:
            body = {"offering": DATA["offering"], "image": DATA["image"]}
            with self.client.post("/api/v1/instances", json=body, headers=self.headers,
                                  catch_response=True) as answer:  # fmt: skip
                if answer.status_code == 202:
                    self.mine.append((answer.json()["id"], time.monotonic()))
                elif answer.status_code in EXPECTED:
                    answer.success()


class ConsoleUser(FastHttpUser):
    """A person in the console (logged in): the dashboard, the instances, billing."""

    weight = 3
    wait_time = between(5, 15)

    def on_start(self) -> None:
        self.cookie = {"Cookie": f"sessionid={random.choice(DATA['sessions'])}"}

    @task(3)
    def dashboard(self) -> None:
        self.client.get("/console/", headers=self.cookie)

    @task(3)
    def instances(self) -> None:
        self.client.get("/console/instances/", headers=self.cookie)

    @task(1)
    def billing(self) -> None:
        self.client.get("/billing/", headers=self.cookie)
