"""`starverse jobs`: submitting by flags or as a SkyPilot task, listing, showing, following a
rank's log as it is written and cancelling, against the scripted API (tests/cli/conftest.py)."""

import io
import json
import threading
import uuid

from starverse_cli.main import main
from tests.cli.test_commands import logged_in, run

JOB = {
    "id": "job_abc",
    "name": "llama-ft",
    "status": "queued",
    "node_count": 2,
    "restarts": 0,
    "exit_code": None,
    "cost_fen": 0,
    "ranks": [],
    "started_at": None,
    "finished_at": None,
    "notes": [],
}
RUNNING = dict(
    JOB,
    status="running",
    restarts=1,
    cost_fen=123456,
    started_at="2030-06-30T18:00:12+08:00",
    ranks=[
        {"rank": 0, "node": "gpu-h100-01", "status": "running"},
        {"rank": 1, "node": "gpu-h100-07", "status": "running"},
    ],
)
TASK = """\
name: llama-ft
workdir: ./code  # the training code
num_nodes: 2
resources:
  cloud: aws
  accelerators: H100:8
run: |
  torchrun train.py
"""


def test_submit_by_flags_orders_the_job_with_a_new_idempotency_key(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    offerings = [{"id": "off_node", "name": "8× H100 80GB SXM bare metal"}]
    fake_api.on("GET", "/api/v1/offerings", body={"count": 1, "next": None, "results": offerings})
    fake_api.on("GET", "/api/v1/disks", body=[{"id": "dsk_1", "name": "ckpt"}])
    fake_api.on("POST", "/api/v1/jobs", 202, JOB)
    code, out, err = run(
        "jobs", "submit", "--name", "llama-ft", "--image", "deepspeed-0.12",
        "--offering", "8× H100 80GB SXM bare metal", "--nodes", "2", "--env", "STEPS=100",
        "--env", "ARGS=--lr=3e-4", "--checkpoint-dir", "/nas/ckpt", "--max-restarts", "5",
        "--time-limit", "600", "--template", "deepspeed", "--disk", "ckpt", "--nas",
        "--", "python", "train.py", "--out", "my dir",
    )  # fmt: skip
    assert (code, out, err) == (0, "job_abc: queued\n", "")
    (posted,) = [sent for sent in fake_api.sent if sent.method == "POST"]
    assert posted.path == "/api/v1/jobs"
    assert posted.body == {
        "image": "deepspeed-0.12",
        "offering": "off_node",
        "command": "python train.py --out 'my dir'",
        "name": "llama-ft",
        "node_count": 2,
        "env": {"STEPS": "100", "ARGS": "--lr=3e-4"},
        "checkpoint_dir": "/nas/ckpt",
        "max_restarts": 5,
        "time_limit_minutes": 600,
        "template": "deepspeed",
        "nas": True,
        "disks": ["dsk_1"],
    }
    assert uuid.UUID(posted.headers["Idempotency-Key"]).version == 4


def test_submit_takes_one_shell_line_as_it_is_or_a_script(cli_env, fake_api, monkeypatch, tmp_path):
    logged_in(fake_api, monkeypatch)
    fake_api.on("POST", "/api/v1/jobs", 202, JOB)
    line = "cd /nas/code && python train.py | tee log"
    assert run("jobs", "submit", "--image", "x", "--offering", "off_1", "--", line)[0] == 0
    script = tmp_path / "train.sh"
    script.write_text("set -e\npython train.py\n")
    code, *_ = run("jobs", "submit", "--image", "x", "--offering", "off_1", "--script", str(script))
    assert code == 0
    first, second = (sent.body for sent in fake_api.sent)
    assert first == {"image": "x", "offering": "off_1", "command": line}
    assert second == {"image": "x", "offering": "off_1", "script": "set -e\npython train.py\n"}


def test_submit_a_skypilot_task_sends_it_unchanged_and_prints_the_notes(
    cli_env, fake_api, monkeypatch, tmp_path
):
    logged_in(fake_api, monkeypatch)
    notes = [
        "`resources.cloud: aws` is ignored: jobs run on this platform's cluster.",
        "`workdir: ./code` is not uploaded with the task: the job runs in /nas/workdir/llama-ft "
        "on your NAS, so copy the folder there first.",
    ]
    fake_api.on("POST", "/api/v1/jobs", 202, dict(JOB, notes=notes))
    task = tmp_path / "task.yaml"
    task.write_text(TASK)
    code, out, err = run("jobs", "submit", "-f", str(task), "--idempotency-key", "k-1")
    assert code == 0
    assert out == (
        "job_abc: queued\n"
        "note: `resources.cloud: aws` is ignored: jobs run on this platform's cluster.\n"
        "note: `workdir: ./code` is not uploaded with the task: the job runs in "
        "/nas/workdir/llama-ft on your NAS, so copy the folder there first.\n"
    )
    assert err == (
        "workdir ./code is not uploaded: the job runs in /nas/workdir/<name> on your NAS (the "
        "answer's note names the folder), so copy it there first, through a running instance "
        "(it mounts the NAS at /nas): starverse cp ./code/ INSTANCE:/nas/workdir/<name>\n"
    )
    (posted,) = fake_api.sent
    assert (posted.body, posted.headers["Content-Type"]) == (TASK, "text/yaml")
    assert posted.headers["Idempotency-Key"] == "k-1"
    code, out, _err = run("jobs", "submit", "-f", str(task), "--json")
    assert json.loads(out)["notes"] == notes


def test_submit_dry_run_sends_the_task_with_the_query_and_prints_the_quote_or_refusal(
    cli_env, fake_api, monkeypatch, tmp_path
):
    logged_in(fake_api, monkeypatch)
    note = "`resources.cloud: aws` is ignored: jobs run on this platform's cluster."
    quote = {
        "price_per_hour_fen": 4200,
        "paid_by": "cash",
        "runway_hours": 12.5,
        "queue_position": None,
        "expected_start_s": 0,
        "price_per_month_fen": None,
    }
    refusal = {"status": 402, "code": "insufficient_balance", "detail": "Top up ¥10."}
    path = "/api/v1/jobs?dry_run=true"
    fake_api.on("POST", path, 200, {"quote": quote, "refusal": None, "notes": [note]})
    fake_api.on("POST", path, 200, {"quote": quote, "refusal": refusal, "notes": []})
    task = tmp_path / "task.yaml"
    task.write_text(TASK)
    code, out, _err = run("jobs", "submit", "-f", str(task), "--dry-run")
    assert code == 0
    assert out == (
        f"would be taken: ¥42.00/h paid by cash, starts at once; runway 12.5 h\nnote: {note}\n"
    )
    (posted,) = fake_api.sent
    assert (posted.path, posted.body, posted.headers["Content-Type"]) == (
        path,
        TASK,
        "text/yaml",
    )
    code, out, _err = run(
        "jobs",
        "submit",
        "--image",
        "pytorch-2.1",
        "--offering",
        "off_h100",
        "--dry-run",
        "--",
        "true",
    )
    assert (code, out) == (0, "would be refused (insufficient_balance): Top up ¥10.\n")
    assert fake_api.sent[-1].path == path
    assert fake_api.sent[-1].body["offering"] == "off_h100"


def test_a_task_without_workdir_gets_no_hint_and_stdin_works(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    fake_api.on("POST", "/api/v1/jobs", 202, JOB)
    task = "resources: {accelerators: H100}\n# workdir: ./old\nrun: python -c 'workdir: 1'\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(task))
    assert run("jobs", "submit", "-f", "-") == (0, "job_abc: queued\n", "")
    assert fake_api.sent[0].body == task


def test_submit_refuses_what_cannot_be_sent_without_asking_the_server(
    cli_env, fake_api, monkeypatch, tmp_path
):
    logged_in(fake_api, monkeypatch)
    task = tmp_path / "task.yaml"
    task.write_text(TASK)
    code, _out, err = run("jobs", "submit", "-f", str(task), "--image", "x", "--env", "A=1")
    assert (code, err) == (
        2,
        "starverse: -f sends the task as it is: leave out --image, --env (say it in the task)\n",
    )
    assert run("jobs", "submit", "-f", str(task), "--", "echo")[0] == 2
    code, _out, err = run("jobs", "submit", "-f", str(tmp_path / "nope.yaml"))
    assert code == 2 and "cannot read the task" in err
    code, _out, err = run("jobs", "submit", "--image", "x", "--offering", "off_1")
    assert (code, err) == (
        2,
        "starverse: give the command after `--`, or --script FILE: one of them\n",
    )
    assert run("jobs", "submit", "--offering", "off_1", "--", "echo")[0] == 2
    assert run("jobs", "submit", "--image", "x", "--offering", "o", "--env", "NOVALUE")[0] == 2
    assert run("jobs", "ls", "--", "echo")[0] == 2  # a command after `--` is submit's only
    assert fake_api.sent == []


def test_ls_lists_every_page_as_a_table_or_json(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    done = dict(JOB, id="job_def", name="eval", status="succeeded", node_count=1, cost_fen=990)
    done["started_at"] = "2030-06-29T09:30:00+08:00"
    fake_api.on(
        "GET",
        "/api/v1/jobs",
        body={"count": 2, "next": f"{fake_api.url}/api/v1/jobs?page=2", "results": [RUNNING]},
    )
    fake_api.on("GET", "/api/v1/jobs?page=2", body={"count": 2, "next": None, "results": [done]})
    code, out, _err = run("jobs", "ls")
    assert code == 0
    assert out.splitlines() == [
        "ID       NAME      STATUS     NODES  RESTARTS  COST       STARTED",
        "job_abc  llama-ft  running    2      1         ¥1,234.56  2030-06-30 18:00",
        "job_def  eval      succeeded  1      0         ¥9.90      2030-06-29 09:30",
    ]
    assert json.loads(run("jobs", "ls", "--json")[1]) == [RUNNING, done]
    fake_api.on("GET", "/api/v1/jobs?status=failed", body={"count": 0, "results": []})
    assert run("jobs", "ls", "--status", "failed") == (
        0,
        "ID  NAME  STATUS  NODES  RESTARTS  COST  STARTED\n",
        "",
    )
    # a server that lists every job whatever `?status=` says: the CLI keeps the status asked
    fake_api.on(
        "GET", "/api/v1/jobs?status=succeeded", body={"count": 2, "results": [RUNNING, done]}
    )
    assert json.loads(run("jobs", "ls", "--status", "succeeded", "--json")[1]) == [done]


def test_show_prints_the_job_its_ranks_and_its_recent_events(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    fake_api.on("GET", "/api/v1/jobs/job_abc", body=RUNNING)
    events = [
        {"at": "2030-06-30T17:59:01+08:00", "status": "queued", "text": "Queued."},
        {"at": "2030-06-30T18:00:12+08:00", "status": "running", "text": "Every rank runs."},
    ]
    fake_api.on("GET", "/api/v1/jobs/job_abc/events", body=events)
    code, out, _err = run("jobs", "show", "job_abc")
    assert code == 0
    assert out == (
        "ID:          job_abc\n"
        "Name:        llama-ft\n"
        "Status:      running\n"
        "Nodes:       2\n"
        "Restarts:    1\n"
        "Exit code:   -\n"
        "Cost so far: ¥1,234.56\n"
        "Started:     2030-06-30 18:00\n"
        "Finished:    -\n"
        "\n"
        "RANK  NODE         STATUS\n"
        "0     gpu-h100-01  running\n"
        "1     gpu-h100-07  running\n"
        "\n"
        "AT                STATUS   EVENT\n"
        "2030-06-30 17:59  queued   Queued.\n"
        "2030-06-30 18:00  running  Every rank runs.\n"
    )
    assert json.loads(run("jobs", "show", "job_abc", "--json")[1]) == RUNNING
    assert run("jobs", "show", "job_nope")[0] == 4


def test_logs_prints_a_ranks_tail(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    path = "/api/v1/jobs/job_abc/logs?rank=1&tail=2"
    fake_api.stream("GET", path, ["step 9 loss 1.2\n", "step 10 loss 1.1\n"])
    assert run("jobs", "logs", "job_abc", "--rank", "1", "--tail", "2") == (
        0,
        "step 9 loss 1.2\nstep 10 loss 1.1\n",
        "",
    )
    assert fake_api.sent[0].headers["Accept"] == "text/plain, application/json"
    assert fake_api.sent[0].headers["Authorization"] == "Bearer sv_test"


class Watched(io.StringIO):
    """Standard output whose writes a test can wait for."""

    def __init__(self, awaited: str) -> None:
        super().__init__()
        self.awaited = awaited
        self.seen = threading.Event()

    def write(self, text: str) -> int:
        written = super().write(text)
        if self.awaited in self.getvalue():
            self.seen.set()
        return written


def test_logs_follow_writes_each_chunk_as_it_comes_until_the_rank_ends(
    cli_env, fake_api, monkeypatch
):
    logged_in(fake_api, monkeypatch)
    _job_runs_then_ends(fake_api)
    out, err = Watched("step 1\n"), io.StringIO()
    shown_before_more: list[bool] = []
    fake_api.stream(
        "GET",
        "/api/v1/jobs/job_abc/logs?follow=1",
        # the server sends more only once the first line is out (or 10 s passed: then it was
        # held back, and the assertion below fails)
        ["step 1\n", lambda: shown_before_more.append(out.seen.wait(10)), "step 2 ✓\n", "done"],
    )
    code = main(["jobs", "logs", "job_abc", "-f"], out=out, err=err)
    assert (code, out.getvalue(), err.getvalue()) == (0, "step 1\nstep 2 ✓\ndone", "")
    assert shown_before_more == [True]


def test_a_character_split_between_chunks_is_written_whole(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    _job_runs_then_ends(fake_api)
    text = "训练 step 1\n".encode()
    fake_api.stream("GET", "/api/v1/jobs/job_abc/logs?follow=1", [_Raw(text[:2]), _Raw(text[2:])])
    assert run("jobs", "logs", "job_abc", "-f") == (0, "训练 step 1\n", "")


def _job_runs_then_ends(fake_api) -> None:
    """The job runs when following starts, and has ended when its stream is over."""
    fake_api.on("GET", "/api/v1/jobs/job_abc", body=RUNNING)
    fake_api.on("GET", "/api/v1/jobs/job_abc", body=dict(RUNNING, status="succeeded"))


def test_follow_waits_for_the_start_follows_each_attempt_and_ends_with_the_job(
    cli_env, fake_api, monkeypatch
):
    logged_in(fake_api, monkeypatch)
    job = "/api/v1/jobs/job_abc"
    for status, restarts in (
        ("queued", 0),  # no output yet: waited for
        ("running", 0),
        ("running", 0),  # the stream ended (the program failed), not noticed yet
        ("recovering", 0),  # noticed: it runs again
        ("running", 1),
        ("succeeded", 1),
    ):
        fake_api.on("GET", job, body=dict(RUNNING, status=status, restarts=restarts))
    fake_api.stream("GET", f"{job}/logs?follow=1", ["step 1\n", "error: boom\n"])
    fake_api.stream("GET", f"{job}/logs?tail=0&follow=1", [])
    code, out, err = run("jobs", "logs", "job_abc", "-f")
    assert code == 0
    # the first attempt whole, then the second whole, nothing twice
    assert out == "step 1\nerror: boom\nstep 1\nerror: boom\n"
    assert err == (
        "job_abc: queued\njob_abc: running\njob_abc: recovering\njob_abc: running\n"
        "job_abc: attempt 1\n"
    )
    asked = [sent.path for sent in fake_api.sent if sent.path.startswith(f"{job}/logs")]
    assert asked == [
        f"{job}/logs?follow=1",
        f"{job}/logs?tail=0&follow=1",  # the same attempt: only what comes next
        f"{job}/logs?follow=1",
    ]


def test_follow_of_an_ended_job_writes_its_kept_output_once(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    fake_api.on("GET", "/api/v1/jobs/job_abc", body=dict(RUNNING, status="failed"))
    fake_api.stream("GET", "/api/v1/jobs/job_abc/logs?follow=1", ["step 1\n", "error\n"])
    assert run("jobs", "logs", "job_abc", "-f") == (0, "step 1\nerror\n", "")
    assert [sent.path for sent in fake_api.sent] == [
        "/api/v1/jobs/job_abc",
        "/api/v1/jobs/job_abc/logs?follow=1",
    ]


class _Raw(str):
    """A chunk the fake sends as these bytes (its `encode`), e.g. half a UTF-8 character."""

    raw: bytes

    def __new__(cls, raw: bytes) -> "_Raw":
        made = super().__new__(cls, "")
        made.raw = raw
        return made

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return self.raw


class Interrupted(io.StringIO):
    """Standard output of a user who presses Ctrl-C once the first line is shown."""

    def write(self, text: str) -> int:
        raise KeyboardInterrupt


def test_ctrl_c_ends_following_quietly_with_130(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    _job_runs_then_ends(fake_api)
    fake_api.stream("GET", "/api/v1/jobs/job_abc/logs?follow=1", ["step 1\n"])
    err = io.StringIO()
    assert main(["jobs", "logs", "job_abc", "-f"], out=Interrupted(), err=err) == 130
    assert err.getvalue() == ""


def test_logs_of_an_unknown_job_exit_4(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    code, out, err = run("jobs", "logs", "job_nope")
    assert (code, out, err) == (4, "", "starverse: Not found. [not_found]\n")


def test_cancel_asks_unless_yes(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code, _out, err = run("jobs", "cancel", "job_abc")
    assert code == 2
    assert err == (
        "starverse: Cancel job job_abc? Its GPUs are released now; its logs and its disks' data "
        "are kept. Not asked on a non-interactive input: pass -y\n"
    )
    assert fake_api.sent == []
    fake_api.on("DELETE", "/api/v1/jobs/job_abc", 202, dict(RUNNING, status="cancelling"))
    assert run("jobs", "cancel", "job_abc", "--yes") == (0, "job_abc: cancelling\n", "")
    assert [(sent.method, sent.path) for sent in fake_api.sent] == [
        ("DELETE", "/api/v1/jobs/job_abc")
    ]


def test_cancel_confirmed_on_a_terminal(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    monkeypatch.setattr("sys.stdin", _Terminal("y\n"))
    fake_api.on("DELETE", "/api/v1/jobs/job_abc", 202, dict(RUNNING, status="cancelling"))
    assert run("jobs", "cancel", "job_abc")[0] == 0
    monkeypatch.setattr("sys.stdin", _Terminal("n\n"))
    assert run("jobs", "cancel", "job_abc")[0] == 2
    assert len(fake_api.sent) == 1


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True
