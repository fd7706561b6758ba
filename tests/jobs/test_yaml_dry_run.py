"""`?dry_run=true` on POST /jobs: a SkyPilot task YAML (which has no field for it) is quoted
with the same admission and the same answer as the JSON order, creating nothing."""

from typing import Any

from billing.models import LedgerEntry, LedgerTransaction
from instances.models import Instance
from jobs.models import Job
from tests.factories import fund, make_user

TASK = (
    "name: sky-dry\n"
    "resources:\n  accelerators: H100:{gpus}\n  use_spot: true\n  cloud: aws\n"
    "run: python train.py\n"
)


def _yaml(client, gpus: int, query: str = "?dry_run=true", **headers: Any):
    return client.post(
        f"/api/v1/jobs{query}", data=TASK.format(gpus=gpus), content_type="text/yaml", **headers
    )


def _postings() -> tuple[int, int]:
    return LedgerTransaction.objects.count(), LedgerEntry.objects.count()


def _nothing_created(postings: tuple[int, int]) -> None:
    """No job, no instance, and no ledger posting since `postings` was read."""
    assert not Job.objects.exists()
    assert not Instance.objects.exists()
    assert _postings() == postings


def test_a_yaml_dry_run_quotes_as_the_json_one_and_lists_what_it_ignores(catalog, client_for):
    owner = make_user()
    fund(owner, 1_000_000)
    before = _postings()
    client = client_for(owner)
    dry = _yaml(client, 1, HTTP_IDEMPOTENCY_KEY="k")
    assert dry.status_code == 200, dry.json()
    shown = dry.json()
    body = {"offering": catalog["h100x1"].id, "image": "pytorch-2.1", "command": "true"}
    by_field = client.post("/api/v1/jobs", {**body, "dry_run": True}, format="json").json()
    by_query = client.post("/api/v1/jobs?dry_run=true", body, format="json").json()
    assert shown["quote"] is not None and shown["refusal"] is None
    assert shown["quote"]["expected_start_s"] == 0
    assert shown["quote"] == by_field["quote"] == by_query["quote"]
    assert by_field["notes"] == by_query["notes"] == []
    assert any("use_spot" in note for note in shown["notes"])
    assert any("cloud" in note for note in shown["notes"])
    _nothing_created(before)
    real = _yaml(client, 1, query="", HTTP_IDEMPOTENCY_KEY="k")  # the key was not used
    assert real.status_code == 202, real.json()
    assert real.json()["notes"] == shown["notes"]


def test_a_yaml_dry_run_a_trial_account_cannot_afford_answers_the_real_refusal(catalog, client_for):
    poor = make_user()  # trial credit only: a job of eight H100s needs an hour of it
    client = client_for(poor)
    before = _postings()  # its trial credit
    dry = _yaml(client, 8)
    assert dry.status_code == 200, dry.json()
    _nothing_created(before)
    real = _yaml(client, 8, query="")
    assert real.status_code == 402, real.json()
    _nothing_created(before)
    refusal = dry.json()["refusal"]
    assert refusal is not None
    assert (refusal["status"], refusal["code"], refusal["detail"]) == (
        402,
        real.json()["code"],
        real.json()["detail"],
    )


def test_a_dry_run_query_that_is_not_a_boolean_is_refused_naming_it(catalog, client_for):
    client = client_for(make_user())
    before = _postings()
    answer = _yaml(client, 1, query="?dry_run=perhaps")
    assert answer.status_code == 400, answer.json()
    assert "dry_run" in answer.json()["errors"]
    _nothing_created(before)
