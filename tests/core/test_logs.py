"""Structured logs: one JSON object per line with the request id, which comes from a sane
X-Request-ID or is made here, is echoed in the answer, and travels with the tasks a request
sends into the worker's lines."""

import io
import json
import logging

import pytest
from celery import shared_task, signals
from django.http import HttpResponse

from starverse.celery import app as celery_app
from starverse.core import logs
from starverse.settings.base import logging_config
from tests.factories import make_token, make_user

task_logger = logging.getLogger("tests.task")


@pytest.fixture
def json_lines():
    """A JSON handler, as LOG_FORMAT=json configures it, on the root logger."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    handler.addFilter(logs.ContextFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.INFO)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    root.removeHandler(handler)
    root.setLevel(old_level)


@shared_task
def logs_a_line() -> str:
    task_logger.info("task.ran")
    return logs.request_id.get()


def test_log_format_is_json_or_text():
    assert logging_config("json")["handlers"]["console"]["formatter"] == "json"
    assert logging_config("text")["handlers"]["console"]["formatter"] == "kv"
    with pytest.raises(Exception, match="LOG_FORMAT must be json or text"):
        logging_config("yaml")


def test_a_sane_request_id_is_kept_and_echoed(client, db):
    answer = client.get("/healthz", HTTP_X_REQUEST_ID="edge-7f3a9c2e-41")
    assert answer["X-Request-ID"] == "edge-7f3a9c2e-41"


@pytest.mark.parametrize(
    "given", ["short", "has space in it", "line\nbreak-123456", "x" * 129, 'quote"12345678']
)
def test_an_insane_request_id_is_replaced(client, db, given):
    answer = client.get("/healthz", HTTP_X_REQUEST_ID=given)
    made = answer["X-Request-ID"]
    assert made != given
    assert len(made) == 32 and int(made, 16) >= 0


def test_lines_logged_during_a_request_carry_its_id(rf, db, json_lines):
    user = make_user()

    def view(request):
        logging.getLogger("tests.view").warning("view.says %s", "hello")
        return HttpResponse("ok")

    request = rf.get("/", HTTP_X_REQUEST_ID="req-abcdef0123")
    request.user = user
    response = logs.RequestIdMiddleware(logs.ActorMiddleware(view))(request)

    assert response["X-Request-ID"] == "req-abcdef0123"
    (line,) = [line for line in json_lines() if line["logger"] == "tests.view"]
    assert line["message"] == "view.says hello"
    assert line["level"] == "WARNING"
    assert line["request_id"] == "req-abcdef0123"
    assert line["user"] == str(user.pk)
    assert line["tenant"] == str(user.tenant_id)
    assert line["time"].endswith("+00:00")


def test_djangos_line_about_a_failed_api_request_names_the_token_user(client, db, json_lines):
    user = make_user()
    _token, raw = make_token(user)

    answer = client.get(
        "/api/v1/instances/ins_nosuchthing",
        HTTP_AUTHORIZATION=f"Bearer {raw}",
        HTTP_X_REQUEST_ID="req-api-404-0001",
    )

    assert answer.status_code == 404
    (line,) = [line for line in json_lines() if line["logger"] == "django.request"]
    assert line["message"] == "Not Found: /api/v1/instances/ins_nosuchthing"
    assert (line["request_id"], line["user"]) == ("req-api-404-0001", str(user.pk))
    assert logs.request_id.get() == ""  # cleared once the response is closed


@pytest.mark.filterwarnings("ignore::celery.exceptions.AlwaysEagerIgnored")
def test_the_id_goes_into_published_tasks_and_the_workers_lines(db, json_lines):
    published = []

    def record(headers=None, **_):
        published.append(dict(headers or {}))

    signals.before_task_publish.connect(record, weak=False)
    token = logs.request_id.set("req-from-the-web-1")
    try:
        # a real publish on the in-memory broker, as the web tier sends after commit
        celery_app.send_task(logs_a_line.name)
    finally:
        logs.request_id.reset(token)
        signals.before_task_publish.disconnect(record)
    assert published[-1][logs.TASK_HEADER] == "req-from-the-web-1"

    # the worker's side: the message's headers become the task's request
    seen = logs_a_line.apply(headers={logs.TASK_HEADER: "req-from-the-web-1"}).get()

    assert seen == "req-from-the-web-1"
    (line,) = [line for line in json_lines() if line["message"] == "task.ran"]
    assert line["request_id"] == "req-from-the-web-1"
    assert logs.request_id.get() == ""  # reset after the task


def test_a_task_sent_by_no_request_gets_an_id_of_its_own(db):
    seen = logs_a_line.apply().get()
    assert len(seen) == 32
