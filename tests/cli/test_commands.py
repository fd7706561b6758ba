"""The CLI without a Starverse server: its arguments, output, exit codes, config file and HTTP
behaviour, against a scripted stand-in of the API on 127.0.0.1 (tests/cli/conftest.py)."""

import io
import json
import urllib.request
import uuid
from datetime import datetime
from http.client import HTTPMessage
from pathlib import Path

import pytest

from starverse_cli.client import (
    MAX_ATTEMPTS,
    ApiError,
    Client,
    NetworkError,
    SameOriginAuthorization,
    accept_language,
    plain_http_warning,
)
from starverse_cli.config import Config, config_dir, normalize_api_url
from starverse_cli.main import build_parser, main
from starverse_cli.output import parse_yuan, table, yuan

INSTANCE = {
    "id": "ins_abc",
    "name": "train-1",
    "status": "running",
    "gpu_model": "RTX 4090",
    "gpu_count": 1,
    "price_per_hour_fen": 220,
    "cost_fen": 1234,
    "ssh": {
        "host": "127.0.0.1",
        "port": 31022,
        "user": "root",
        "command": "ssh -p 31022 root@127.0.0.1",
        "host_key_fingerprint": "SHA256:x",
    },
}


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def logged_in(api, monkeypatch) -> None:
    monkeypatch.setenv("STARVERSE_API_URL", api.url)
    monkeypatch.setenv("STARVERSE_TOKEN", "sv_test")


# ---------------------------------------------------------------- money and tables


@pytest.mark.parametrize(
    ("fen", "text"),
    [(0, "¥0.00"), (5, "¥0.05"), (1000, "¥10.00"), (123456789, "¥1,234,567.89"), (-250, "-¥2.50")],
)
def test_yuan_from_fen(fen, text):
    assert yuan(fen) == text


def test_yuan_of_nothing_is_a_dash():
    assert yuan(None) == "-"


@pytest.mark.parametrize(
    ("text", "fen"),
    [("100", 10000), ("99.5", 9950), ("99.50", 9950), ("¥1,000.05", 100005), (" 10 ", 1000)],
)
def test_amounts_are_read_in_yuan_without_floats(text, fen):
    assert parse_yuan(text) == fen


@pytest.mark.parametrize("text", ["", "-5", "1.234", "ten", "1e3", "0x10", "1,00"])
def test_bad_amounts_are_refused(text):
    with pytest.raises(ValueError, match="not an amount"):
        parse_yuan(text)


def test_tables_align_chinese_names_by_display_width():
    out = io.StringIO()
    table(["ID", "NAME"], [["a", "训练"], ["bbb", None]], out)
    assert out.getvalue() == "ID   NAME\na    训练\nbbb  -\n"


# ---------------------------------------------------------------- config


def test_config_lives_under_xdg_config_home_or_appdata(tmp_path):
    assert config_dir({"XDG_CONFIG_HOME": "/x"}, "linux") == Path("/x/starverse")
    assert config_dir({"HOME": "/home/li"}, "linux") == Path("/home/li/.config/starverse")
    assert config_dir({"APPDATA": "C:/Users/li/AppData"}, "win32") == Path(
        "C:/Users/li/AppData/starverse"
    )


def test_the_config_file_is_private_and_the_environment_overrides_it(tmp_path):
    config = Config(tmp_path / "starverse")
    config.set_profile("default", {"api_url": "https://a.example/api/v1/", "token": "sv_file"})
    config.set_profile("lab", {"api_url": "https://lab.example", "token": "sv_lab"})
    config.save()
    assert (tmp_path / "starverse" / "config.json").stat().st_mode & 0o777 == 0o600
    again = Config(tmp_path / "starverse")
    plain = again.settings(profile=None, environ={})
    assert (plain.api_url, plain.token, plain.token_source) == (
        "https://a.example",
        "sv_file",
        "config",
    )
    lab = again.settings(profile="lab", environ={})
    assert (lab.api_url, lab.token) == ("https://lab.example", "sv_lab")
    env = {"STARVERSE_API_URL": "http://127.0.0.1:9/", "STARVERSE_TOKEN": "sv_env"}
    both = again.settings(profile="lab", environ=env)
    assert (both.api_url, both.token, both.token_source) == ("http://127.0.0.1:9", "sv_env", "env")
    flag = again.settings(profile=None, api_url="https://b.example", environ=env)
    assert flag.api_url == "https://b.example"


def test_api_urls_are_taken_with_or_without_the_api_prefix():
    assert normalize_api_url("https://x.example/api/v1/") == "https://x.example"
    assert normalize_api_url("https://x.example/") == "https://x.example"


def test_a_broken_config_file_is_a_clear_error(cli_env):
    cli_env.mkdir(parents=True)
    (cli_env / "config.json").write_text("{not json")
    code, _out, err = run("whoami")
    assert code == 1
    assert "cannot read" in err and "config.json" in err


# ---------------------------------------------------------------- arguments and exit codes


def test_without_a_token_commands_exit_3_and_say_how_to_log_in(cli_env, fake_api, monkeypatch):
    monkeypatch.setenv("STARVERSE_API_URL", fake_api.url)
    code, out, err = run("ls")
    assert code == 3
    assert out == ""
    assert err == "starverse: not logged in: run `starverse login` or set STARVERSE_TOKEN\n"
    assert fake_api.sent == []


def test_usage_errors_exit_2(cli_env, capsys):
    assert run("rent", "off_x")[0] == 2  # --image is required
    assert run("nosuchcommand")[0] == 2
    assert run("ls", "--", "x")[0] == 2  # a remote command is ssh's only
    assert "--image" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("status", "code"), [(400, 1), (401, 3), (402, 5), (403, 1), (404, 4), (409, 6), (500, 1)]
)
def test_api_errors_map_to_exit_codes_and_print_message_and_code(
    cli_env, fake_api, monkeypatch, status, code
):
    logged_in(fake_api, monkeypatch)
    body = {"detail": "Nope.", "code": "some_code", "errors": {"image": ["Unknown image."]}}
    fake_api.on("POST", "/api/v1/instances/ins_abc/start", status, body)
    exit_code, out, err = run("start", "ins_abc")
    assert exit_code == code
    assert out == ""
    assert err.startswith("starverse: Nope. [some_code]\n  image: Unknown image.\n")


def test_an_unreachable_server_exits_7(cli_env, monkeypatch):
    monkeypatch.setenv("STARVERSE_API_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("STARVERSE_TOKEN", "sv_test")
    monkeypatch.setattr("starverse_cli.client.time.sleep", lambda s: None)
    code, _out, err = run("balance")
    assert code == 7
    assert "cannot reach http://127.0.0.1:9" in err


def test_json_is_accepted_before_or_after_the_command():
    parser = build_parser()
    assert parser.parse_args(["--json", "ls"]).json is True
    assert parser.parse_args(["ls", "--json"]).json is True
    assert parser.parse_args(["disks", "ls", "--json"]).json is True
    assert parser.parse_args(["ls"]).json is False


def test_the_server_and_profile_are_accepted_before_or_after_the_command(monkeypatch):
    monkeypatch.delenv("STARVERSE_PROFILE", raising=False)
    parser = build_parser()
    after = parser.parse_args(["login", "--api-url", "http://h:1", "--profile", "lab"])
    before = parser.parse_args(["--api-url", "http://h:1", "--profile", "lab", "login"])
    assert (
        (after.api_url, after.profile) == (before.api_url, before.profile) == ("http://h:1", "lab")
    )
    neither = parser.parse_args(["disks", "ls"])
    assert (neither.api_url, neither.profile) == (None, None)


def test_ls_prints_a_table_or_the_api_json_of_every_page(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    second = dict(INSTANCE, id="ins_def", status="terminated", ssh=None)
    fake_api.on(
        "GET",
        "/api/v1/instances",
        body={"count": 2, "next": f"{fake_api.url}/api/v1/instances?page=2", "results": [INSTANCE]},
    )
    fake_api.on(
        "GET", "/api/v1/instances?page=2", body={"count": 2, "next": None, "results": [second]}
    )
    code, out, _err = run("ls", "--all", "--json")
    assert code == 0
    assert json.loads(out) == [INSTANCE, second]
    code, out, _err = run("ls")
    assert out.splitlines() == [
        "ID       NAME     STATUS   GPUS         PRICE/H  COST    SSH",
        "ins_abc  train-1  running  1× RTX 4090  ¥2.20    ¥12.34  ssh -p 31022 root@127.0.0.1",
    ]
    assert fake_api.sent[0].headers["Authorization"] == "Bearer sv_test"


def test_rent_sends_a_new_idempotency_key_each_time(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    fake_api.on("POST", "/api/v1/instances", 202, dict(INSTANCE, status="provisioning", ssh=None))
    assert run("rent", "off_1", "--image", "pytorch-2.1", "--monthly", "--port", "6006")[0] == 0
    assert run("rent", "off_1", "--image", "pytorch-2.1")[0] == 0
    first, second = (sent for sent in fake_api.sent if sent.method == "POST")
    assert first.body == {
        "offering": "off_1",
        "image": "pytorch-2.1",
        "billing": "monthly",
        "ports": [6006],
    }
    keys = [first.headers["Idempotency-Key"], second.headers["Idempotency-Key"]]
    assert keys[0] != keys[1]
    assert all(uuid.UUID(key).version == 4 for key in keys)


def test_clone_orders_a_copy_under_a_new_key_and_waits_for_it(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    copy = dict(INSTANCE, id="ins_def", name="copy", status="provisioning")
    answer = {"instance": copy, "cloned_from": "ins_abc", "consistency": "crash_consistent"}
    fake_api.on("POST", "/api/v1/instances/ins_abc/clone", 202, answer)
    fake_api.on("GET", "/api/v1/instances/ins_def", body=dict(copy, status="running"))
    code, out, err = run("clone", "ins_abc", "--name", "copy", "--region", "bj", "--wait", "--json")
    assert code == 0
    assert json.loads(out)["status"] == "running"
    assert err.startswith("ins_abc is running: its disks are copied as they are at that instant")
    [sent] = [sent for sent in fake_api.sent if sent.method == "POST"]
    assert sent.body == {"name": "copy", "region": "bj"}
    assert uuid.UUID(sent.headers["Idempotency-Key"]).version == 4


def test_rent_wait_polls_until_running_and_reports_progress_off_a_terminal(
    cli_env, fake_api, monkeypatch
):
    logged_in(fake_api, monkeypatch)
    fake_api.on("POST", "/api/v1/instances", 202, dict(INSTANCE, status="provisioning"))
    path = "/api/v1/instances/ins_abc"
    fake_api.on("GET", path, body=dict(INSTANCE, status="provisioning")).on(
        "GET", path, body=INSTANCE
    )
    code, out, err = run("rent", "off_1", "--image", "x", "--wait", "--json")
    assert code == 0
    assert json.loads(out)["status"] == "running"
    assert err == "ins_abc: provisioning\nins_abc: running\n"


def test_waiting_ends_with_exit_1_on_failure_and_7_on_timeout(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    failed = dict(INSTANCE, status="failed", error_message="Image pull failed.")
    fake_api.on("POST", "/api/v1/instances/ins_abc/start", 202, dict(INSTANCE, status="queued"))
    fake_api.on("GET", "/api/v1/instances/ins_abc", body=failed)
    code, _out, err = run("start", "ins_abc", "--wait")
    assert code == 1
    assert "ins_abc is failed: Image pull failed." in err

    fake_api.answers[("GET", "/api/v1/instances/ins_abc")] = [
        (200, dict(INSTANCE, status="queued"), {})
    ]
    code, _out, err = run("start", "ins_abc", "--wait", "--timeout", "0")
    assert code == 7
    assert "timed out" in err and "still queued" in err


def test_rm_asks_unless_yes_and_refuses_without_a_terminal(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code, _out, err = run("rm", "ins_abc")
    assert code == 2
    assert "pass -y" in err
    assert fake_api.sent == []
    fake_api.on(
        "DELETE",
        "/api/v1/instances/ins_abc?keep_disk=true",
        202,
        dict(INSTANCE, status="terminating"),
    )
    assert run("rm", "ins_abc", "-y", "--keep-disk") == (0, "ins_abc: terminating\n", "")


def test_topup_prints_the_checkout_url_alone_on_stdout(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    answer = {
        "id": "top_1",
        "status": "pending",
        "amount_fen": 9950,
        "checkout_url": "https://pay/x",
    }
    fake_api.on("POST", "/api/v1/billing/topups", 201, answer)
    code, out, err = run("topup", "99.50", "--method", "alipay")
    assert (code, out) == (0, "https://pay/x\n")
    assert "top_1" in err and "¥99.50" in err
    assert fake_api.sent[0].body == {"amount_fen": 9950, "payment_method": "alipay"}
    assert uuid.UUID(fake_api.sent[0].headers["Idempotency-Key"]).version == 4
    assert run("topup", "lots")[0] == 2


def test_balance_in_yuan(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    balance = {
        "cash_fen": 10000,
        "promo_fen": 550,
        "arrears_fen": 0,
        "total_fen": 10550,
        "on_hold": False,
        "currency": "CNY",
    }
    fake_api.on("GET", "/api/v1/billing/balance", body=balance)
    code, out, _err = run("balance")
    assert code == 0
    assert out == "Balance:      ¥105.50\nCash:         ¥100.00\nTrial credit: ¥5.50\n"

    fake_api.answers.clear()
    fake_api.on("GET", "/api/v1/billing/balance", body={**balance, "pending_fen": 220})
    code, out, _err = run("balance")
    assert code == 0
    assert out.splitlines()[-1] == "Used, not yet posted: ¥2.20"


def test_login_checks_the_token_before_saving_it(cli_env, fake_api, monkeypatch):
    monkeypatch.setenv("STARVERSE_API_URL", fake_api.url)
    fake_api.on(
        "GET", "/api/v1/me", 401, {"detail": "Invalid token.", "code": "authentication_failed"}
    )
    code, _out, _err = run("login", "--token", "sv_bad")
    assert code == 3
    assert not (cli_env / "config.json").exists()

    fake_api.answers.clear()
    fake_api.on("GET", "/api/v1/me", body={"id": "usr_1", "email": "li@lab.edu.cn"})
    code, out, _err = run("login", "--token", "sv_good")
    assert code == 0
    assert "li@lab.edu.cn" in out
    saved = json.loads((cli_env / "config.json").read_text())
    assert saved["profiles"]["default"] == {"api_url": fake_api.url, "token": "sv_good"}
    assert fake_api.sent[-1].headers["Authorization"] == "Bearer sv_good"

    assert run("logout")[0] == 0
    saved = json.loads((cli_env / "config.json").read_text())
    assert saved["profiles"]["default"] == {"api_url": fake_api.url}


def test_offerings_need_no_token_and_names_resolve_to_ids(cli_env, fake_api, monkeypatch):
    monkeypatch.setenv("STARVERSE_API_URL", fake_api.url)
    offering = {
        "id": "off_1",
        "name": "1× RTX 4090 24GB",
        "gpu_model": "RTX 4090",
        "gpu_count": 1,
        "price_per_hour_fen": 220,
        "price_per_month_fen": None,
        "available": 8,
    }
    fake_api.on("GET", "/api/v1/offerings", body=[offering])
    code, out, _err = run("offerings")
    assert code == 0
    assert out.splitlines()[1].split() == [
        "off_1",
        "1×",
        "RTX",
        "4090",
        "24GB",
        "1×",
        "RTX",
        "4090",
        "¥2.20",
        "-",
        "8",
    ]
    assert "Authorization" not in fake_api.sent[0].headers

    monkeypatch.setenv("STARVERSE_TOKEN", "sv_test")
    fake_api.on("POST", "/api/v1/instances", 202, dict(INSTANCE, status="provisioning"))
    assert run("rent", "1× rtx 4090 24gb", "--image", "x")[0] == 0
    assert fake_api.sent[-1].body["offering"] == "off_1"
    assert run("rent", "8× B200", "--image", "x")[0] == 4


def test_ssh_on_an_instance_that_is_not_running_is_a_conflict(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    fake_api.on("GET", "/api/v1/instances/ins_abc", body=dict(INSTANCE, status="stopped", ssh=None))
    code, _out, err = run("ssh", "ins_abc")
    assert code == 6
    assert "ins_abc is stopped" in err


# ---------------------------------------------------------------- HTTP behaviour


def test_a_throttled_call_waits_retry_after_and_is_repeated(fake_api):
    fake_api.on(
        "POST",
        "/api/v1/billing/topups",
        429,
        {"detail": "Slow down.", "code": "throttled"},
        {"Retry-After": "3"},
    )
    fake_api.on("POST", "/api/v1/billing/topups", 201, {"id": "top_1"})
    slept: list[float] = []
    client = Client(fake_api.url, "sv_test", sleep=slept.append)
    assert client.post("billing/topups", {"amount_fen": 1000}) == {"id": "top_1"}
    assert slept == [3.0]
    assert len(fake_api.sent) == 2


def test_a_429_without_retry_after_is_an_answer_not_a_wait(fake_api):
    fake_api.on("POST", "/api/v1/instances", 429, {"detail": "Queue full.", "code": "queue_limit"})
    slept: list[float] = []
    client = Client(fake_api.url, "sv_test", sleep=slept.append)
    with pytest.raises(ApiError) as raised:
        client.post("instances", {"offering": "off_1"}, headers={"Idempotency-Key": "k"})
    assert (raised.value.status, raised.value.code) == (429, "queue_limit")
    assert slept == []


def test_throttling_gives_up_after_max_attempts(fake_api):
    fake_api.on(
        "GET",
        "/api/v1/me",
        429,
        {"detail": "Slow down.", "code": "throttled"},
        {"Retry-After": "999"},
    )
    slept: list[float] = []
    with pytest.raises(ApiError):
        Client(fake_api.url, "sv_test", sleep=slept.append).get("me")
    assert slept == [60.0] * (MAX_ATTEMPTS - 1)  # capped


def test_connection_errors_are_retried_only_for_safe_calls():
    slept: list[float] = []
    client = Client("http://127.0.0.1:9", "sv_test", sleep=slept.append)
    with pytest.raises(NetworkError):
        client.get("me")
    assert len(slept) == MAX_ATTEMPTS - 1
    slept.clear()
    with pytest.raises(NetworkError):
        client.post("instances", {}, headers={"Idempotency-Key": "k"})  # repeatable
    assert len(slept) == MAX_ATTEMPTS - 1
    slept.clear()
    with pytest.raises(NetworkError):
        client.post("instances/ins_abc/stop")  # not repeated: it may have been done
    assert slept == []
    with pytest.raises(NetworkError):  # a key the server does not dedupe on: not repeated
        client.request(
            "POST", "billing/topups", body={}, headers={"Idempotency-Key": "k"}, repeatable=False
        )
    assert slept == []


def test_api_messages_follow_the_users_locale():
    assert accept_language({"LANG": "zh_CN.UTF-8"}) == "zh-hans, en;q=0.5"
    assert accept_language({"LC_ALL": "en_US.UTF-8", "LANG": "zh_CN.UTF-8"}) == "en"
    assert accept_language({}) == "en"


def test_an_error_without_a_json_body_is_reported_with_its_status(fake_api, cli_env, monkeypatch):
    logged_in(fake_api, monkeypatch)
    fake_api.on("GET", "/api/v1/instances/ins_abc", 502, None)
    code, _out, err = run("show", "ins_abc")
    assert code == 1
    assert err == "starverse: HTTP 502 Bad Gateway\n"
    code, _out, err = run("show", "ins_missing")  # the stand-in's JSON 404
    assert code == 4
    assert err == "starverse: Not found. [not_found]\n"


def _moved(api, to: str) -> None:
    """The stand-in's /me answers a redirect to `to` (a URL)."""
    api.on("GET", "/api/v1/me", 302, None, {"Location": to})


def test_a_redirect_to_another_port_is_followed_without_the_token(
    cli_env, fake_api, other_api, monkeypatch
):
    logged_in(fake_api, monkeypatch)
    _moved(fake_api, f"{other_api.url}/api/v1/me")
    other_api.on("GET", "/api/v1/me", body=ME)

    code, out, _err = run("whoami")

    assert code == 0 and "li@lab.edu.cn" in out
    assert fake_api.sent[0].headers["Authorization"] == "Bearer sv_test"
    assert [sent.path for sent in other_api.sent] == ["/api/v1/me"]
    assert "Authorization" not in other_api.sent[0].headers


def test_a_redirect_to_another_host_is_followed_without_the_token(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    # the same server under another name: the same port, another host
    elsewhere = fake_api.url.replace("127.0.0.1", "localhost")
    _moved(fake_api, f"{elsewhere}/api/v1/me/")
    fake_api.on("GET", "/api/v1/me/", body=ME)

    assert run("whoami")[0] == 0

    assert [s.headers.get("Authorization") for s in fake_api.sent] == ["Bearer sv_test", None]


def test_a_redirect_within_the_server_keeps_the_token(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    _moved(fake_api, "/api/v1/me/")  # a relative address: the same origin
    fake_api.on("GET", "/api/v1/me/", body=ME)

    assert run("whoami")[0] == 0

    assert [s.headers.get("Authorization") for s in fake_api.sent] == ["Bearer sv_test"] * 2


@pytest.mark.parametrize(
    ("target", "kept"),
    [
        ("https://api.example.com/api/v1/me", False),  # another scheme
        ("http://api.example.com:8080/api/v1/me", False),  # another port
        ("http://www.example.com/api/v1/me", False),  # another host
        ("http://API.example.com:80/api/v1/me/", True),  # the same origin, spelt otherwise
    ],
)
def test_the_token_follows_a_redirect_only_to_the_same_origin(target, kept):
    request = urllib.request.Request(
        "http://api.example.com/api/v1/me", headers={"Authorization": "Bearer sv_test"}
    )

    follow = SameOriginAuthorization().redirect_request(
        request, io.BytesIO(), 302, "Found", HTTPMessage(), target
    )

    assert follow is not None and follow.full_url == target
    assert follow.has_header("Authorization") is kept


@pytest.mark.parametrize(
    ("url", "warned"),
    [
        ("http://gpu.example.com", True),
        ("http://10.0.0.5:8000", True),
        ("http://[2001:db8::1]:8000", True),
        ("https://gpu.example.com", False),
        ("http://127.0.0.1:8000", False),
        ("http://127.8.9.10", False),
        ("http://[::1]:8000", False),
        ("http://localhost:8000", False),
        ("http://LOCALHOST", False),
    ],
)
def test_plain_http_is_warned_about_unless_it_stays_on_this_machine(url, warned):
    expected = (
        f"warning: {url} is plain http://: the API token and passwords cross the network "
        "unencrypted; use the server's https:// address"
    )
    assert plain_http_warning(url) == (expected if warned else None)


def test_a_command_warns_once_on_stderr_about_a_plain_http_address(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    fake_api.on("GET", "/api/v1/me", body=ME)
    # 0.0.0.0 reaches this machine's server too, but is no loopback address
    address = fake_api.url.replace("127.0.0.1", "0.0.0.0")  # noqa: S104 (an address to call)

    code, out, err = run("whoami", "--api-url", address)

    assert (code, err) == (0, f"{plain_http_warning(address)}\n")
    assert err.startswith(f"warning: {address} is plain http://")
    assert "li@lab.edu.cn" in out
    assert run("whoami")[2] == ""  # loopback: no warning


# ---------------------------------------------------------------- teams


ME = {"id": "usr_1", "email": "li@lab.edu.cn", "email_verified": True, "balance": {"total_fen": 0}}
NLP = {"id": "tnt_nlp", "name": "NLP lab", "role": "admin"}


def test_login_with_email_asks_for_a_token_of_the_team(cli_env, fake_api, monkeypatch):
    monkeypatch.setenv("STARVERSE_API_URL", fake_api.url)
    monkeypatch.setattr("sys.stdin", io.StringIO("a long passphrase\n"))
    created = {"id": "tok_1", "name": "cli", "team": "tnt_nlp", "scopes": ["read"], "token": "sv_t"}
    fake_api.on("POST", "/api/v1/auth/token", 201, created)
    fake_api.on("GET", "/api/v1/me", body=dict(ME, team=NLP, scopes=["read"]))

    code, out, _err = run(
        "login", "--email", "li@lab.edu.cn", "--password-stdin", "--team", "NLP lab"
    )

    assert code == 0
    assert fake_api.sent[0].body == {
        "email": "li@lab.edu.cn",
        "password": "a long passphrase",
        "name": fake_api.sent[0].body["name"],
        "team": "NLP lab",
    }
    assert "as li@lab.edu.cn for team NLP lab (tnt_nlp, admin)" in out
    saved = json.loads((cli_env / "config.json").read_text())
    assert saved["profiles"]["default"]["token"] == "sv_t"


def test_a_pasted_token_is_its_own_teams_and_another_is_refused(cli_env, fake_api, monkeypatch):
    monkeypatch.setenv("STARVERSE_API_URL", fake_api.url)
    fake_api.on("GET", "/api/v1/me", body=dict(ME, team=None, scopes=["read"]))

    code, _out, err = run("login", "--token", "sv_personal", "--team", "tnt_nlp")

    assert code == 2
    assert "this token acts for your own account, not 'tnt_nlp'" in err
    assert not (cli_env / "config.json").exists()
    fake_api.answers.clear()
    fake_api.on("GET", "/api/v1/me", body=dict(ME, team=NLP, scopes=["read"]))
    code, out, _err = run("login", "--token", "sv_team", "--team", "nlp LAB")
    assert code == 0
    assert "for team NLP lab (tnt_nlp, admin)" in out
    code, out, _err = run("login", "--token", "sv_team")  # without --team: shown all the same
    assert "for team NLP lab" in out


def test_whoami_prints_the_team_role_and_scopes(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    fake_api.on("GET", "/api/v1/me", body=dict(ME, team=NLP, scopes=["read", "instances"]))

    code, out, _err = run("whoami")

    assert code == 0
    assert out.splitlines() == [
        "Account:  usr_1",
        "E-mail:   li@lab.edu.cn",
        "Verified: yes",
        "Team:     NLP lab (tnt_nlp)",
        "Role:     admin",
        "Scopes:   read, instances",
        "Balance:  ¥0.00",
    ]
    fake_api.answers.clear()
    fake_api.on("GET", "/api/v1/me", body=dict(ME, team=None, scopes=["read"]))
    out = run("whoami")[1]
    assert "Team:     - (your own account)" in out and "Role" not in out


# ---------------------------------------------------------------- automatic stops


def _bodies(api, method):
    return [sent.body for sent in api.sent if sent.method == method]


def test_rent_orders_the_automatic_stops(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    fake_api.on("POST", "/api/v1/instances", 202, dict(INSTANCE, status="provisioning"))

    assert run("rent", "off_1", "--image", "x", "--stop-after", "8", "--idle-stop", "5:30")[0] == 0
    assert run("rent", "off_1", "--image", "x", "--no-idle-stop")[0] == 0

    first, second = _bodies(fake_api, "POST")
    assert first == {
        "offering": "off_1",
        "image": "x",
        "stop_after_hours": 8,
        "idle_stop": {"util_pct": 5, "minutes": 30},
    }
    assert second == {"offering": "off_1", "image": "x", "idle_stop": None}


@pytest.mark.parametrize(
    "words",
    [
        ["--stop-after", "0"],
        ["--stop-after", "1.5"],
        ["--stop-after", "soon"],
        ["--idle-stop", "5"],
        ["--idle-stop", "0:30"],
        ["--idle-stop", "101:30"],
        ["--idle-stop", "5:0"],
        ["--idle-stop", "a:b"],
        ["--idle-stop", "5:30", "--no-idle-stop"],
    ],
)
def test_bad_automatic_stops_are_usage_errors_and_send_nothing(
    cli_env, fake_api, monkeypatch, capsys, words
):
    logged_in(fake_api, monkeypatch)

    assert run("rent", "off_1", "--image", "x", *words)[0] == 2
    assert run("set", "ins_abc", *words)[0] == 2

    assert fake_api.sent == []
    assert "error: argument" in capsys.readouterr().err


def test_set_patches_and_clears_the_automatic_stops(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    answer = dict(
        INSTANCE, idle_stop={"util_pct": 5, "minutes": 30}, stop_at="2030-01-01T08:00:00+08:00"
    )
    fake_api.on("PATCH", "/api/v1/instances/ins_abc", body=answer)

    code, out, _err = run("set", "ins_abc", "--stop-at", "2030-01-01T08:00+08:00")
    assert code == 0
    shown = dict(line.split(": ", 1) for line in out.splitlines())
    assert shown["Idle stop"].strip() == "below 5% GPU for 30 min"
    assert shown["Stops at"].strip() == "2030-01-01T08:00:00+08:00"
    assert run("set", "ins_abc", "--stop-at", "2030-01-01T00:00Z", "--no-idle-stop")[0] == 0
    assert run("set", "ins_abc", "--stop-after", "3", "--idle-stop", "10:60")[0] == 0
    assert run("set", "ins_abc", "--no-stop-at")[0] == 0
    assert run("set", "ins_abc", "--stop-at", "2030-01-01T08:00")[0] == 0

    bodies = _bodies(fake_api, "PATCH")
    assert bodies[:4] == [
        {"stop_at": "2030-01-01T08:00:00+08:00"},
        {"stop_at": "2030-01-01T00:00:00+00:00", "idle_stop": None},
        {"stop_after_hours": 3, "idle_stop": {"util_pct": 10, "minutes": 60}},
        {"stop_at": None},
    ]
    local = datetime.fromisoformat(bodies[4]["stop_at"])  # no offset: this computer's time
    assert local.tzinfo is not None
    assert local.replace(tzinfo=None) == datetime(2030, 1, 1, 8, 0)


def test_set_without_a_change_or_with_two_stops_is_a_usage_error(
    cli_env, fake_api, monkeypatch, capsys
):
    logged_in(fake_api, monkeypatch)

    code, _out, err = run("set", "ins_abc")
    assert code == 2
    assert "nothing to set" in err
    assert run("set", "ins_abc", "--stop-after", "2", "--no-stop-at")[0] == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert fake_api.sent == []


def test_disks_resize_grows_the_disk(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    disk = {"id": "dsk_1", "name": "ckpt", "size_gb": 500, "status": "available"}
    fake_api.on("PATCH", "/api/v1/disks/dsk_1", body=disk)

    code, out, _err = run("disks", "resize", "dsk_1", "500")

    assert code == 0
    assert fake_api.sent[0].body == {"size_gb": 500}
    assert "dsk_1" in out and "500 GB" in out
    assert run("disks", "resize", "dsk_1", "lots")[0] == 2


def test_clusters_scale_posts_the_new_node_count(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    cluster = {"id": "clu_1", "name": "pretrain", "status": "stopped", "node_count": 2}
    fake_api.on("POST", "/api/v1/clusters/clu_1/scale", body=cluster)

    code, out, _err = run("clusters", "scale", "clu_1", "2", "--keep-disks", "--json")

    assert code == 0
    assert fake_api.sent[0].body == {"node_count": 2, "keep_disks": True}
    assert json.loads(out)["node_count"] == 2
    assert run("clusters", "scale", "clu_1", "two")[0] == 2


PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOr1BvIo8xxdHv6R8Fsc0g0ihRYGQ8Kh7LdVb9RlmDzq"
KEY_ROW = {
    "id": "key_1",
    "name": "me@laptop",
    "key_type": "ssh-ed25519",
    "fingerprint": "SHA256:Qe0d4I8w1Zs9tVb3vLq7P1m0KxUo2dRj9gYh6cN4aAk",
    "public_key": PUBLIC_KEY,
    "created_at": "2026-12-01T08:00:00+08:00",
}


def test_keys_add_reads_the_default_public_key_and_names_it_by_its_comment(
    cli_env, fake_api, monkeypatch, tmp_path
):
    logged_in(fake_api, monkeypatch)
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_rsa.pub").write_text("ssh-rsa AAAAB3 old@laptop\n")
    (tmp_path / ".ssh" / "id_ed25519.pub").write_text(f"{PUBLIC_KEY} me@laptop\n")
    fake_api.on("POST", "/api/v1/ssh-keys", status=201, body=KEY_ROW)

    code, out, err = run("keys", "add")

    assert code == 0, err
    assert fake_api.sent[0].body == {"name": "me@laptop", "public_key": f"{PUBLIC_KEY} me@laptop"}
    assert "key_1" in out and "SHA256:Qe0d4I8w" in out and "2026-12-01" in out

    monkeypatch.setattr("sys.stdin", io.StringIO(f"{PUBLIC_KEY} runner@ci\n"))
    code, out, err = run("keys", "add", "-", "--name", "ci", "--json")
    assert code == 0, err
    assert fake_api.sent[1].body == {"name": "ci", "public_key": f"{PUBLIC_KEY} runner@ci"}
    assert json.loads(out)["id"] == "key_1"


def test_keys_add_refuses_a_private_key_or_no_key_without_asking_the_server(
    cli_env, fake_api, monkeypatch, tmp_path
):
    logged_in(fake_api, monkeypatch)

    code, _out, err = run("keys", "add")
    assert code == 2
    assert "no public key in" in err and "ssh-keygen -t ed25519" in err

    private = tmp_path / "id_ed25519"
    private.write_text(
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----\n"
    )
    code, _out, err = run("keys", "add", str(private))
    assert code == 2
    assert "private key" in err
    (tmp_path / "id_ed25519.pub").write_text(PUBLIC_KEY + "\n")
    code, _out, err = run("keys", "add", str(private))
    assert code == 2
    assert f"name {private}.pub" in err
    assert run("keys", "add", str(tmp_path / "missing.pub"))[0] == 2
    assert fake_api.sent == []


def test_keys_rm_by_name_deletes_that_key(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    listing = {"count": 1, "next": None, "results": [KEY_ROW]}
    fake_api.on("GET", "/api/v1/ssh-keys", body=listing)
    fake_api.on("DELETE", "/api/v1/ssh-keys/key_1", status=204)

    assert run("keys", "rm", "me@laptop")[0] == 2  # off a terminal: -y or nothing
    code, out, err = run("keys", "rm", "ME@laptop", "-y")

    assert code == 0, err
    assert out == "removed\n"
    assert [(sent.method, sent.path) for sent in fake_api.sent][-1] == (
        "DELETE",
        "/api/v1/ssh-keys/key_1",
    )
    assert run("keys", "rm", "desktop", "-y")[0] == 4


# ---------------------------------------------------------------- the server


def test_a_command_says_which_server_it_uses_when_nobody_named_one(cli_env):
    code, _out, err = run("ls")

    assert code == 3
    assert err == (
        "using http://127.0.0.1:8000, the default server (no --api-url, STARVERSE_API_URL or "
        "saved login names one); the console's API tokens page shows the "
        "`starverse login --api-url …` line for its server\n"
        "starverse: not logged in: run `starverse login` or set STARVERSE_TOKEN\n"
    )


def test_a_named_server_is_not_announced(cli_env, fake_api, monkeypatch):
    logged_in(fake_api, monkeypatch)
    fake_api.on("GET", "/api/v1/me", body=ME)

    code, _out, err = run("whoami")

    assert (code, err) == (0, "")
