"""`starverse`: the command line, its arguments and its exit codes.

Exit codes (stable: scripts rely on them):
  0 ok · 1 API error · 2 usage · 3 authentication (no or invalid token) · 4 not found ·
  5 payment required (402) · 6 conflict (409: wrong state, idempotency) · 7 timeout or network ·
  130 interrupted (Ctrl-C)
"""

from __future__ import annotations

import argparse
import codecs
import getpass
import os
import platform
import re
import shlex
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

from starverse_cli import __version__, completion, sshpin, transfer
from starverse_cli.client import TIMEOUT_S, ApiError, Client, NetworkError, plain_http_warning
from starverse_cli.config import Config, ConfigError, Settings, config_dir
from starverse_cli.output import dump_json, fields, parse_yuan, table, yuan

OK, API_ERROR, USAGE, AUTH, NOT_FOUND, PAYMENT, CONFLICT, TIMEOUT = range(8)
INTERRUPTED = 130  # Ctrl-C, as a shell reports SIGINT
# The commands that take a command after `--`: (command, its action).
TAKE_COMMAND = {("ssh", None), ("jobs", "submit")}
STATUS_EXIT = {401: AUTH, 402: PAYMENT, 404: NOT_FOUND, 409: CONFLICT}
SPINNER = "|/-\\"
INSTANCE_END = {"failed", "terminated"}
CLUSTER_END = {"failed", "terminated"}
# A job whose rank has output to follow (running), or that has ended (its kept output).
JOB_END = {"succeeded", "failed", "cancelling", "cancelled"}
JOB_LOGGING = {"running", *JOB_END}
# A followed log the server ends sooner than this after it was asked: the program has ended.
FOLLOW_BRIEF_S = 1.0


class CliError(Exception):
    """A failure the CLI itself reports: its message and exit code."""

    def __init__(self, message: str, code: int = API_ERROR) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Context:
    args: argparse.Namespace
    config: Config
    out: TextIO
    err: TextIO
    _client: Client | None = None
    _warned: bool = False
    _told_default: bool = False

    @property
    def json(self) -> bool:
        return bool(getattr(self.args, "json", False))

    def settings(self) -> Settings:
        """The server, token and profile this command runs with; a server nobody named (the
        default, this machine's `make run`) is said on stderr, once per command."""
        settings = self.config.settings(profile=self.args.profile, api_url=self.args.api_url)
        if settings.defaulted and not self._told_default:
            self._told_default = True
            self.note(
                f"using {settings.api_url}, the default server (no --api-url, STARVERSE_API_URL "
                "or saved login names one); the console's API tokens page shows the "
                "`starverse login --api-url …` line for its server"
            )
        return settings

    def settings_client(self, *, auth: bool = True) -> Client:
        if self._client is None:
            settings = self.settings()
            if auth and not settings.token:
                raise CliError("not logged in: run `starverse login` or set STARVERSE_TOKEN", AUTH)
            self._client = self.make_client(settings.api_url, settings.token)
        return self._client

    def make_client(self, api_url: str, token: str | None) -> Client:
        """Every command's client: a plain http:// address off this machine is warned about on
        stderr, once per command."""
        warning = plain_http_warning(api_url)
        if warning and not self._warned:
            self._warned = True
            self.note(warning)
        return Client(api_url, token)

    @property
    def client(self) -> Client:
        return self.settings_client()

    def emit(self, value: Any, human: Callable[[], object]) -> None:
        if self.json:
            dump_json(value, self.out)
        else:
            human()

    def note(self, text: str) -> None:
        """Progress and hints: stderr, so stdout stays what a script reads."""
        self.err.write(text + "\n")
        self.err.flush()


# ---------------------------------------------------------------- account


def cmd_login(ctx: Context) -> int:
    args = ctx.args
    # the server from --api-url, STARVERSE_API_URL or the profile; the token is the new one
    settings = ctx.settings()
    client = ctx.make_client(settings.api_url, None)
    if args.email:
        password = _secret("Password: ", args.password_stdin)
        body = {"email": args.email, "password": password, "name": args.token_name}
        if args.otp:
            body["otp"] = args.otp
        if args.team:
            body["team"] = args.team  # the server takes the team's id or exact name
        try:
            created = client.post("auth/token", body, auth=False)
        except ApiError as error:
            if error.code != "otp_required" or not sys.stdin.isatty():
                raise
            body["otp"] = input("Authenticator code: ").strip()
            created = client.post("auth/token", body, auth=False)
        token = str(created["token"])
    else:
        token = args.token or _secret("API token (sv_…): ", not sys.stdin.isatty())
    token = token.strip()
    if not token:
        raise CliError("no token given", USAGE)
    me = ctx.make_client(settings.api_url, token).get(
        "me"
    )  # a token that does not work is not saved
    team = me.get("team")
    if args.team and not _is_team(team, args.team):
        # a pasted token acts for its own team: say which, rather than save the wrong one
        raise CliError(
            f"this token acts for {_team_words(team)}, not {args.team!r}: make a token for the "
            "team (the console's API tokens, or `starverse login --email … --team …`)",
            USAGE,
        )
    ctx.config.set_profile(settings.profile, {"api_url": settings.api_url, "token": token})
    ctx.config.save()
    ctx.emit(
        {"profile": settings.profile, "api_url": settings.api_url, "user": me},
        lambda: ctx.out.write(
            f"Logged in to {settings.api_url} as {me.get('email')} for {_team_words(team)} "
            f"(profile {settings.profile}; saved in {ctx.config.path}).\n"
        ),
    )
    return OK


def _is_team(team: dict[str, Any] | None, wanted: str) -> bool:
    if not team:
        return False
    return wanted == team.get("id") or wanted.lower() == str(team.get("name", "")).lower()


def _team_words(team: dict[str, Any] | None) -> str:
    if not team:
        return "your own account"
    return f"team {team.get('name')} ({team.get('id')}, {team.get('role')})"


def _secret(prompt: str, from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\n")
    return getpass.getpass(prompt)


def cmd_logout(ctx: Context) -> int:
    name = ctx.config.profile_name(ctx.args.profile)
    values = ctx.config.profile(name)
    values.pop("token", None)
    ctx.config.set_profile(name, values)
    ctx.config.save()
    ctx.emit({"profile": name}, lambda: ctx.out.write(f"Logged out (profile {name}).\n"))
    return OK


def cmd_whoami(ctx: Context) -> int:
    me = ctx.client.get("me")
    balance = me.get("balance") or {}
    ctx.emit(
        me,
        lambda: fields(
            [
                ("Account", me.get("id")),
                ("E-mail", me.get("email")),
                ("Verified", "yes" if me.get("email_verified") else "no"),
                *_acting(me),
                ("Balance", yuan(balance.get("total_fen"))),
            ],
            ctx.out,
        ),
    )
    return OK


def _acting(me: dict[str, Any]) -> list[tuple[str, Any]]:
    """Whom the token acts for: the team with the person's role in it (or their own account),
    and the token's scopes."""
    team = me.get("team")
    pairs: list[tuple[str, Any]] = (
        [("Team", f"{team.get('name')} ({team.get('id')})"), ("Role", team.get("role"))]
        if team
        else [("Team", "- (your own account)")]
    )
    if me.get("scopes") is not None:
        pairs.append(("Scopes", ", ".join(me["scopes"]) or "-"))
    return pairs


# ---------------------------------------------------------------- SSH keys

# What `keys add` reads when no file is named: OpenSSH's default public keys, in its order.
DEFAULT_PUBLIC_KEYS = ("id_ed25519.pub", "id_ecdsa.pub", "id_rsa.pub")


def _key_rows(ctx: Context, rows: list[dict[str, Any]]) -> None:
    table(
        ["ID", "NAME", "TYPE", "FINGERPRINT", "ADDED"],
        [
            [
                row["id"],
                row.get("name"),
                row.get("key_type"),
                row.get("fingerprint"),
                (row.get("created_at") or "")[:10],
            ]
            for row in rows
        ],
        ctx.out,
    )


def cmd_keys_ls(ctx: Context) -> int:
    rows = ctx.client.list_all("ssh-keys")
    ctx.emit(rows, lambda: _key_rows(ctx, rows))
    return OK


def _public_key(path: str | None) -> tuple[str, str]:
    """(the key's text, where it came from): the file named, `-` for stdin, or the first of
    ~/.ssh's default public keys."""
    if path == "-":
        return sys.stdin.read().strip(), "stdin"
    if path is None:
        ssh_dir = os.path.join(os.path.expanduser("~"), ".ssh")
        found = [os.path.join(ssh_dir, name) for name in DEFAULT_PUBLIC_KEYS]
        path = next((each for each in found if os.path.isfile(each)), None)
        if path is None:
            raise CliError(
                f"no public key in {ssh_dir} ({', '.join(DEFAULT_PUBLIC_KEYS)}): make one with "
                "`ssh-keygen -t ed25519` or name the .pub file",
                USAGE,
            )
    if not path.endswith(".pub") and os.path.isfile(path + ".pub"):
        raise CliError(f"{path} looks like a private key: name {path}.pub", USAGE)
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip(), path
    except OSError as error:
        raise CliError(f"cannot read {path}: {error.strerror}", USAGE) from error


def cmd_keys_add(ctx: Context) -> int:
    text, source = _public_key(ctx.args.file)
    if text.startswith("-----BEGIN"):
        raise CliError(f"{source} holds a private key: add its .pub", USAGE)
    words = text.split()  # type, key, comment
    name = ctx.args.name or (words[2] if len(words) > 2 else "")
    row = ctx.client.post("ssh-keys", {"name": name[:100], "public_key": text})
    ctx.emit(row, lambda: _key_rows(ctx, [row]))
    return OK


def cmd_keys_rm(ctx: Context) -> int:
    key = _resolve(ctx.client, "ssh-keys", ctx.args.key, "SSH key")
    _confirm(
        ctx,
        f"Remove SSH key {ctx.args.key}? Your running instances stop accepting it within a minute.",
    )
    ctx.client.delete(f"ssh-keys/{key}")
    ctx.emit({"id": key, "deleted": True}, lambda: ctx.out.write("removed\n"))
    return OK


# ---------------------------------------------------------------- catalog


def cmd_offerings(ctx: Context) -> int:
    rows = ctx.settings_client(auth=False).list_all("offerings")
    ctx.emit(
        rows,
        lambda: table(
            ["ID", "NAME", "GPUS", "PRICE/H", "PRICE/MONTH", "FREE"],
            [
                [
                    row["id"],
                    row["name"],
                    f"{row['gpu_count']}× {row['gpu_model']}",
                    yuan(row["price_per_hour_fen"]),
                    yuan(row.get("price_per_month_fen")),
                    row["available"],
                ]
                for row in rows
            ],
            ctx.out,
        ),
    )
    return OK


def _resolve(client: Client, path: str, value: str, what: str) -> str:
    """An id from an id or an exact name (case-insensitive) among the caller's `path` list."""
    rows = client.list_all(path)
    if any(row.get("id") == value for row in rows):
        return value
    named = [row for row in rows if str(row.get("name", "")).lower() == value.lower()]
    if len(named) == 1:
        return str(named[0]["id"])
    if named:
        ids = ", ".join(str(row["id"]) for row in named)
        raise CliError(f"several {what}s are named {value!r}: use an id ({ids})", USAGE)
    raise CliError(f"no {what} {value!r}", NOT_FOUND)


# ---------------------------------------------------------------- instances


def _gpus(row: dict[str, Any]) -> str:
    return f"{row.get('gpu_count')}× {row.get('gpu_model')}"


def _instance_human(ctx: Context, row: dict[str, Any]) -> None:
    ssh = row.get("ssh") or {}
    pairs: list[tuple[str, Any]] = [
        ("ID", row["id"]),
        ("Name", row.get("name")),
        ("Status", row.get("status")),
        ("GPUs", _gpus(row)),
        ("Image", row.get("image")),
        ("Billing", row.get("billing")),
        ("Price/h", yuan(row.get("price_per_hour_fen"))),
        ("Cost so far", yuan(row.get("cost_fen"))),
        ("Region", row.get("region")),
        ("Disks", ", ".join(row.get("disks") or [])),
    ]
    if row.get("queue_position"):
        pairs.append(("Queue position", row["queue_position"]))
    if "idle_stop" in row:
        pairs.append(("Idle stop", _idle_words(row.get("idle_stop"))))
    if row.get("stop_at"):
        pairs.append(("Stops at", row["stop_at"]))
    if ssh:
        pairs += [("SSH", ssh.get("command")), ("Host key", ssh.get("host_key_fingerprint"))]
    if row.get("jupyter_url"):
        pairs.append(("Jupyter", row["jupyter_url"]))
    if row.get("error_message"):
        pairs.append(("Error", row["error_message"]))
    fields(pairs, ctx.out)


def _wait(
    ctx: Context,
    path: str,
    target: set[str],
    end: set[str],
    timeout: float,
    *,
    read: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Poll `path` until its status is in `target`: a spinner on a terminal, a line per status
    change otherwise. CliError when it ends elsewhere (1) or time runs out (7). `read`: the
    object as the caller has just read it (its status is the first shown)."""
    interval = float(os.environ.get("STARVERSE_POLL_INTERVAL", "2"))
    deadline = time.monotonic() + timeout
    started, shown, turn = time.monotonic(), "", 0
    tty = ctx.err.isatty() and not ctx.json
    while True:
        row: dict[str, Any] = read if read is not None else ctx.client.get(path)
        read = None
        status = str(row.get("status"))
        if tty:
            spent = int(time.monotonic() - started)
            ctx.err.write(f"\r{SPINNER[turn % 4]} {row['id']}: {status} ({spent}s)   ")
            ctx.err.flush()
            turn += 1
        elif status != shown:
            ctx.note(f"{row['id']}: {status}")
        shown = status
        if status in target or status in end:
            if tty:
                ctx.err.write("\n")
            if status in target:
                return row
            reason = row.get("error_message") or ""
            raise CliError(f"{row['id']} is {status}" + (f": {reason}" if reason else ""))
        if time.monotonic() >= deadline:
            if tty:
                ctx.err.write("\n")
            raise CliError(
                f"timed out after {int(timeout)}s waiting for {row['id']} (still {status})",
                TIMEOUT,
            )
        time.sleep(interval)


def _idle_words(idle: dict[str, Any] | None) -> str:
    if not idle:
        return "off"
    return f"below {idle.get('util_pct')}% GPU for {idle.get('minutes')} min"


def stop_after_hours(text: str) -> int:
    """--stop-after: whole hours from now, at least 1."""
    try:
        hours = int(text)
    except ValueError:
        hours = 0
    if hours < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of hours (a whole number ≥ 1)")
    return hours


def idle_stop(text: str) -> dict[str, int]:
    """--idle-stop PCT:MINUTES: stop once every GPU has been below PCT % for MINUTES."""
    pct, _, minutes = text.partition(":")
    try:
        value = {"util_pct": int(pct), "minutes": int(minutes)}
    except ValueError:
        value = {}
    if not value or not 1 <= value["util_pct"] <= 100 or value["minutes"] < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not PCT:MINUTES (e.g. 5:30: every GPU below 5% for 30 minutes)"
        )
    return value


def stop_at(text: str) -> str:
    """--stop-at: an ISO 8601 time; without an offset it is the local time of this computer."""
    raw = text.strip()
    try:
        moment = datetime.fromisoformat(raw[:-1] + "+00:00" if raw.endswith("Z") else raw)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time like 2030-06-30T18:00 or 2030-06-30T18:00+08:00"
        ) from None
    return moment.astimezone().isoformat() if moment.tzinfo is None else moment.isoformat()


def _stops(args: argparse.Namespace) -> dict[str, Any]:
    """The automatic stops an order or `set` asks for, as the API's fields."""
    body: dict[str, Any] = {}
    if getattr(args, "stop_after", None) is not None:
        body["stop_after_hours"] = args.stop_after
    if getattr(args, "stop_at", None) is not None:
        body["stop_at"] = args.stop_at
    if getattr(args, "no_stop_at", False):
        body["stop_at"] = None
    if args.idle_stop is not None:
        body["idle_stop"] = args.idle_stop
    if args.no_idle_stop:
        body["idle_stop"] = None
    return body


def cmd_rent(ctx: Context) -> int:
    args, client = ctx.args, ctx.client
    offering = args.offering
    if not offering.startswith("off_"):
        offering = _resolve(ctx.settings_client(auth=False), "offerings", offering, "offering")
    body: dict[str, Any] = {"offering": offering, "image": args.image}
    if args.name:
        body["name"] = args.name
    if args.region:
        body["region"] = args.region
    if args.monthly:
        body["billing"] = "monthly"
    if args.disk:
        body["disks"] = [_resolve(client, "disks", disk, "disk") for disk in args.disk]
    if args.ssh_key:
        body["ssh_keys"] = [_resolve(client, "ssh-keys", key, "SSH key") for key in args.ssh_key]
    if args.port:
        body["ports"] = args.port
    body.update(_stops(args))
    key = args.idempotency_key or str(uuid.uuid4())
    row = client.post("instances", body, headers={"Idempotency-Key": key})
    if args.wait:
        row = _wait(ctx, f"instances/{row['id']}", {"running"}, INSTANCE_END, args.timeout)
    ctx.emit(row, lambda: _instance_human(ctx, row))
    return OK


def cmd_clone(ctx: Context) -> int:
    """Order a copy of an instance (its system disk, its own disk, its image and settings)."""
    args, client = ctx.args, ctx.client
    body: dict[str, Any] = {}
    if args.name:
        body["name"] = args.name
    if args.offering:
        offering = args.offering
        if not offering.startswith("off_"):
            offering = _resolve(ctx.settings_client(auth=False), "offerings", offering, "offering")
        body["offering"] = offering
    if args.region:
        body["region"] = args.region
    key = args.idempotency_key or str(uuid.uuid4())
    answer = client.post(f"instances/{args.id}/clone", body, headers={"Idempotency-Key": key})
    row = answer["instance"]
    if answer.get("consistency") == "crash_consistent":
        ctx.err.write(
            f"{args.id} is running: its disks are copied as they are at that instant "
            "(crash-consistent; stop it first for a clean copy)\n"
        )
    if args.wait:
        row = _wait(ctx, f"instances/{row['id']}", {"running"}, INSTANCE_END, args.timeout)
    ctx.emit(row, lambda: _instance_human(ctx, row))
    return OK


def cmd_set(ctx: Context) -> int:
    body = _stops(ctx.args)
    if not body:
        raise CliError(
            "nothing to set: give --stop-after, --stop-at, --no-stop-at, --idle-stop or "
            "--no-idle-stop",
            USAGE,
        )
    row = ctx.client.patch(f"instances/{ctx.args.id}", body)
    ctx.emit(row, lambda: _instance_human(ctx, row))
    return OK


def cmd_ls(ctx: Context) -> int:
    rows = ctx.client.list_all("instances", status=ctx.args.status)
    if not ctx.args.all and not ctx.args.status:
        rows = [row for row in rows if row.get("status") != "terminated"]
    ctx.emit(
        rows,
        lambda: table(
            ["ID", "NAME", "STATUS", "GPUS", "PRICE/H", "COST", "SSH"],
            [
                [
                    row["id"],
                    row.get("name"),
                    row.get("status"),
                    _gpus(row),
                    yuan(row.get("price_per_hour_fen")),
                    yuan(row.get("cost_fen")),
                    (row.get("ssh") or {}).get("command"),
                ]
                for row in rows
            ],
            ctx.out,
        ),
    )
    return OK


def cmd_show(ctx: Context) -> int:
    row = ctx.client.get(f"instances/{ctx.args.id}")
    if ctx.json:
        dump_json(row, ctx.out)
        return OK
    _instance_human(ctx, row)
    events = ctx.client.list_all(f"instances/{ctx.args.id}/events")
    if events:
        ctx.out.write("\n")
        table(
            ["AT", "STATUS", "MESSAGE"],
            [[e.get("at"), e.get("status"), e.get("message")] for e in events[-10:]],
            ctx.out,
        )
    return OK


def _pinned_ssh(ctx: Context, row: dict[str, Any], what: str) -> dict[str, Any]:
    """The running instance's SSH address with its host key pinned in the CLI's known_hosts
    (never trusted on first use)."""
    ssh = row.get("ssh")
    if not ssh:
        raise CliError(
            f"{row['id']} is {row.get('status')}: {what} while it runs "
            f"(start it with `starverse start {row['id']} --wait`)",
            CONFLICT,
        )
    expected = ssh.get("host_key_fingerprint")
    if not expected:
        raise CliError(f"the API names no host key for {row['id']}: cannot verify the host")
    try:
        sshpin.pin(ctx.config.known_hosts, ssh["host"], int(ssh["port"]), expected)
    except sshpin.HostKeyError as error:
        raise CliError(str(error)) from error
    return dict(ssh)


def cmd_ssh(ctx: Context) -> int:
    row = ctx.client.get(f"instances/{ctx.args.id}")
    ssh = _pinned_ssh(ctx, row, "SSH works")
    known_hosts = ctx.config.known_hosts
    command = list(getattr(ctx.args, "remote", []))
    argv = sshpin.ssh_argv(
        host=ssh["host"],
        port=int(ssh["port"]),
        user=ssh.get("user") or "root",
        known_hosts=known_hosts,
        identity=ctx.args.identity,
        options=ctx.args.option or (),
        command=command,
        program=os.environ.get("STARVERSE_SSH", "ssh"),
    )
    if ctx.args.print_command:
        ctx.emit(argv, lambda: ctx.out.write(shlex.join(argv) + "\n"))
        return OK
    ctx.out.flush()
    ctx.err.flush()
    try:
        return sshpin.run_ssh(argv)
    except sshpin.HostKeyError as error:
        raise CliError(str(error)) from error


# ssh's default private keys (`ssh -i` otherwise)
DEFAULT_PRIVATE_KEYS = ("id_ed25519", "id_ecdsa", "id_rsa", "id_ed25519_sk", "id_ecdsa_sk")
TRANSFER_EXIT = {
    transfer.BROKEN: TIMEOUT,
    transfer.INTERRUPTED: INTERRUPTED,
    transfer.REFUSED: API_ERROR,
    transfer.FAILED: API_ERROR,
}


def _has_ssh_key(identity: str | None) -> None:
    """Refuse early, with what to do, when this computer has no key ssh would offer."""
    if identity:
        if not os.path.isfile(identity):
            raise CliError(f"no private key at {identity} (-i)", USAGE)
        return
    ssh_dir = os.path.join(os.path.expanduser("~"), ".ssh")
    if os.environ.get("SSH_AUTH_SOCK") or os.path.isfile(os.path.join(ssh_dir, "config")):
        return  # an agent, or the user's own ssh configuration, may hold the key
    if not any(os.path.isfile(os.path.join(ssh_dir, name)) for name in DEFAULT_PRIVATE_KEYS):
        raise CliError(
            f"no SSH key: none in {ssh_dir} ({', '.join(DEFAULT_PRIVATE_KEYS[:3])}) and no "
            "ssh-agent. Make one with `ssh-keygen -t ed25519`, add it with `starverse keys "
            "add`, or name a private key with -i",
            USAGE,
        )


def _instance_row(ctx: Context, ref: str) -> dict[str, Any]:
    found = ref if ref.startswith("ins_") else _resolve(ctx.client, "instances", ref, "instance")
    row: dict[str, Any] = ctx.client.get(f"instances/{found}")
    return row


def _writable(ctx: Context, row: dict[str, Any], path: str) -> None:
    """Refuse a destination outside what the instance keeps, before anything is sent."""
    normal = transfer.remote_path(path)
    mounts: list[str] = []
    nas: bool | None = None
    if normal.startswith("/mnt"):
        mounts = [
            str(disk["mount_path"])
            for disk in ctx.client.list_all("disks")
            if disk.get("attached_to") == row["id"] and disk.get("mount_path")
        ]
    if normal.startswith("/nas"):
        try:
            ctx.client.get("nas")
            nas = True
        except ApiError as error:
            if error.status != 404:
                raise
            nas = False
    problem = transfer.destination_problem(normal, mounts, nas)
    if problem:
        raise CliError(problem, USAGE)


def _cp_places(args: argparse.Namespace) -> tuple[list[transfer.Location], transfer.Location]:
    """The sources and the destination, one side on one instance."""
    *sources, dest = [transfer.location(text) for text in [*args.source, args.dest]]
    named = {place.instance for place in sources if place.instance}
    if dest.instance and named:
        raise CliError(
            "copy between an instance and this computer, not between two places on instances "
            "(copy to here first, or run `starverse ssh` and copy from there)",
            USAGE,
        )
    if not dest.instance and not named:
        raise CliError(
            "name the instance on one side as INSTANCE:PATH, e.g. `starverse cp ./data "
            "ins_…:/root/data` or `starverse cp ins_…:/root/out ./out`",
            USAGE,
        )
    if named and (len(named) > 1 or any(place.instance is None for place in sources)):
        raise CliError("copy from one instance at a time, every source on it", USAGE)
    return sources, dest


def cmd_cp(ctx: Context) -> int:
    args = ctx.args
    sources, dest = _cp_places(args)
    row = _instance_row(ctx, dest.instance or sources[0].instance or "")
    if dest.instance:
        _writable(ctx, row, dest.path)
    if row.get("ssh"):  # keys first: a missing one is said before any connection
        _has_ssh_key(args.identity)
        if not ctx.client.list_all("ssh-keys"):
            raise CliError(
                "your account has no SSH key, so the instance accepts none: add yours with "
                "`starverse keys add` (a running instance takes it within a minute)"
            )
    ssh = _pinned_ssh(ctx, row, "files can be copied")
    remote = transfer.Remote(
        host=ssh["host"],
        port=int(ssh["port"]),
        user=ssh.get("user") or "root",
        known_hosts=ctx.config.known_hosts,
        identity=args.identity,
        options=tuple(args.option or ()),
        program=os.environ.get("STARVERSE_SSH", "ssh"),
    )
    progress = not ctx.json and ctx.err.isatty()
    err = None if ctx.json else ctx.err
    try:
        if dest.instance:
            outcome = transfer.upload(
                remote,
                [place.path for place in sources],
                transfer.remote_path(dest.path),
                use_rsync=not args.no_rsync,
                progress=progress,
                err=err,
            )
        else:
            outcome = transfer.download(
                remote,
                [transfer.remote_path(place.path) for place in sources],
                dest.path,
                use_rsync=not args.no_rsync,
                progress=progress,
                err=err,
            )
    except transfer.TransferError as error:
        raise CliError(str(error), TRANSFER_EXIT[error.kind]) from error
    result = {
        "instance": row["id"],
        "transport": outcome.transport,
        "files": outcome.files,
        "skipped": outcome.skipped,
        "sent_bytes": outcome.sent_bytes,
    }

    def human() -> None:
        if outcome.transport == "ssh":
            ctx.out.write(
                f"{outcome.files} file(s) copied, {outcome.skipped} already there, "
                f"{outcome.sent_bytes} bytes sent (over ssh: no rsync on both ends)\n"
            )
        else:
            ctx.out.write("copied (rsync)\n")

    ctx.emit(result, human)
    return OK


def _action(ctx: Context, kind: str, verb: str, target: set[str], end: set[str]) -> int:
    """POST an instance's or a cluster's action (`kind`: instances, clusters), then with
    --wait follow it until it reaches `target` (or fails into `end`)."""
    row = ctx.client.post(f"{kind}/{ctx.args.id}/{verb}")
    if ctx.args.wait:
        row = _wait(ctx, f"{kind}/{row['id']}", target, end, ctx.args.timeout)
    ctx.emit(row, lambda: ctx.out.write(f"{row['id']}: {row.get('status')}\n"))
    return OK


def _instance_action(ctx: Context, verb: str, target: set[str]) -> int:
    return _action(ctx, "instances", verb, target, INSTANCE_END)


def cmd_stop(ctx: Context) -> int:
    return _instance_action(ctx, "stop", {"stopped"})


def cmd_start(ctx: Context) -> int:
    return _instance_action(ctx, "start", {"running"})


def _confirm(ctx: Context, question: str) -> None:
    if ctx.args.yes:
        return
    if not sys.stdin.isatty():
        raise CliError(f"{question} Not asked on a non-interactive input: pass -y", USAGE)
    answer = input(f"{question} [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise CliError("cancelled", USAGE)


def cmd_rm(ctx: Context) -> int:
    instance = ctx.args.id
    keep = " (its disk is kept as a cloud disk)" if ctx.args.keep_disk else ""
    _confirm(ctx, f"Terminate {instance}{keep}? This cannot be undone.")
    query = {"keep_disk": "true"} if ctx.args.keep_disk else {}
    row = ctx.client.delete(f"instances/{instance}", **query)
    if ctx.args.wait:
        row = _wait(ctx, f"instances/{row['id']}", {"terminated"}, {"failed"}, ctx.args.timeout)
    ctx.emit(row, lambda: ctx.out.write(f"{row['id']}: {row.get('status')}\n"))
    return OK


# ---------------------------------------------------------------- disks


def _disk_rows(ctx: Context, rows: list[dict[str, Any]]) -> None:
    table(
        ["ID", "NAME", "SIZE", "STATUS", "ATTACHED TO", "REGION"],
        [
            [
                row["id"],
                row.get("name"),
                f"{row.get('size_gb')} GB",
                row.get("status"),
                row.get("attached_to"),
                row.get("region"),
            ]
            for row in rows
        ],
        ctx.out,
    )


def cmd_disks_ls(ctx: Context) -> int:
    rows = ctx.client.list_all("disks")
    ctx.emit(rows, lambda: _disk_rows(ctx, rows))
    return OK


def cmd_disks_create(ctx: Context) -> int:
    body: dict[str, Any] = {"name": ctx.args.name, "size_gb": ctx.args.size_gb}
    if ctx.args.region:
        body["region"] = ctx.args.region
    row = ctx.client.post("disks", body)
    ctx.emit(row, lambda: _disk_rows(ctx, [row]))
    return OK


def cmd_disks_resize(ctx: Context) -> int:
    row = ctx.client.patch(f"disks/{ctx.args.id}", {"size_gb": ctx.args.size_gb})
    ctx.emit(row, lambda: _disk_rows(ctx, [row]))
    return OK


def cmd_disks_rm(ctx: Context) -> int:
    _confirm(ctx, f"Delete disk {ctx.args.id} and its data?")
    ctx.client.delete(f"disks/{ctx.args.id}")
    ctx.emit({"id": ctx.args.id, "deleted": True}, lambda: ctx.out.write("deleted\n"))
    return OK


def cmd_disks_attach(ctx: Context) -> int:
    body = {"disk": ctx.args.disk, "restart": ctx.args.restart}
    row = ctx.client.post(f"instances/{ctx.args.instance}/disks", body)
    ctx.emit(row, lambda: ctx.out.write(f"{ctx.args.disk} → {ctx.args.instance}\n"))
    return OK


def cmd_disks_detach(ctx: Context) -> int:
    query = {"restart": "true"} if ctx.args.restart else {}
    row = ctx.client.delete(f"instances/{ctx.args.instance}/disks/{ctx.args.disk}", **query)
    ctx.emit(row, lambda: ctx.out.write(f"{ctx.args.disk} detached\n"))
    return OK


# ---------------------------------------------------------------- clusters


def _cluster_rows(ctx: Context, rows: list[dict[str, Any]]) -> None:
    table(
        ["ID", "NAME", "STATUS", "NODES", "PRICE/H", "COST"],
        [
            [
                row["id"],
                row.get("name"),
                row.get("status"),
                f"{row.get('node_count')}× {row.get('gpu_model')}",
                yuan(row.get("price_per_hour_fen")),
                yuan(row.get("cost_fen")),
            ]
            for row in rows
        ],
        ctx.out,
    )


def cmd_clusters_ls(ctx: Context) -> int:
    rows = ctx.client.list_all("clusters")
    ctx.emit(rows, lambda: _cluster_rows(ctx, rows))
    return OK


def _cluster_human(ctx: Context, row: dict[str, Any]) -> None:
    _cluster_rows(ctx, [row])
    ranks = row.get("ranks") or []
    if ranks:
        ctx.out.write("\n")
        table(
            ["RANK", "INSTANCE", "NODE", "STATUS", "HOST"],
            [
                [r.get("rank"), r.get("instance"), r.get("node"), r.get("status"), r.get("host")]
                for r in ranks
            ],
            ctx.out,
        )
    launch = row.get("launch") or {}
    if launch:
        ctx.out.write("\n")
        fields(sorted(launch.items()), ctx.out)


def cmd_clusters_create(ctx: Context) -> int:
    args, client = ctx.args, ctx.client
    offering = args.offering
    if not offering.startswith("off_"):
        offering = _resolve(ctx.settings_client(auth=False), "offerings", offering, "offering")
    body: dict[str, Any] = {
        "offering": offering,
        "node_count": args.nodes,
        "image": args.image,
        "template": args.template,
    }
    if args.name:
        body["name"] = args.name
    if args.region:
        body["region"] = args.region
    if args.monthly:
        body["billing"] = "monthly"
    if args.ssh_key:
        body["ssh_keys"] = [_resolve(client, "ssh-keys", key, "SSH key") for key in args.ssh_key]
    key = args.idempotency_key or str(uuid.uuid4())
    row = client.post("clusters", body, headers={"Idempotency-Key": key})
    if args.wait:
        row = _wait(ctx, f"clusters/{row['id']}", {"running"}, CLUSTER_END, args.timeout)
    ctx.emit(row, lambda: _cluster_human(ctx, row))
    return OK


def cmd_clusters_show(ctx: Context) -> int:
    row = ctx.client.get(f"clusters/{ctx.args.id}")
    ctx.emit(row, lambda: _cluster_human(ctx, row))
    return OK


def _cluster_action(ctx: Context, verb: str, target: set[str]) -> int:
    return _action(ctx, "clusters", verb, target, CLUSTER_END)


def cmd_clusters_stop(ctx: Context) -> int:
    return _cluster_action(ctx, "stop", {"stopped"})


def cmd_clusters_start(ctx: Context) -> int:
    return _cluster_action(ctx, "start", {"running"})


def cmd_clusters_scale(ctx: Context) -> int:
    """A stopped cluster to NODES nodes: fewer terminates the highest ranks (their own disks
    deleted unless --keep-disks), more adds stopped ranks that start with the others."""
    body = {"node_count": ctx.args.nodes, "keep_disks": ctx.args.keep_disks}
    row = ctx.client.post(f"clusters/{ctx.args.id}/scale", body)
    ctx.emit(row, lambda: _cluster_human(ctx, row))
    return OK


def cmd_clusters_rm(ctx: Context) -> int:
    _confirm(ctx, f"Terminate cluster {ctx.args.id} and every rank? This cannot be undone.")
    row = ctx.client.delete(f"clusters/{ctx.args.id}")
    ctx.emit(row, lambda: ctx.out.write(f"{row['id']}: {row.get('status')}\n"))
    return OK


# ---------------------------------------------------------------- jobs

JOB_TEMPLATES = ["torchrun", "deepspeed", "megatron", "colossalai", "none"]
# What `submit` builds an order from; with -f the task says it all.
ORDER_FLAGS = (
    "name",
    "image",
    "offering",
    "nodes",
    "env",
    "checkpoint_dir",
    "max_restarts",
    "time_limit",
    "template",
    "disk",
    "nas",
    "script",
)
# A SkyPilot task's top-level `workdir:` (its value, a comment left off): read without a YAML
# parser, as the CLI is standard library only and the server reads the task itself.
_WORKDIR = re.compile(r"^workdir:[ \t]*([^#\s][^#]*?)[ \t]*(?:#.*)?$", re.MULTILINE)


def env_pair(text: str) -> tuple[str, str]:
    """--env NAME=VALUE (the value may be empty or hold `=`)."""
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name, value


def _moment(value: str | None) -> str | None:
    """`2030-06-30 18:00` of an ISO 8601 time, as the API gives it (its own offset)."""
    return value[:16].replace("T", " ") if value else None


def _job_rows(ctx: Context, rows: list[dict[str, Any]]) -> None:
    table(
        ["ID", "NAME", "STATUS", "NODES", "RESTARTS", "COST", "STARTED"],
        [
            [
                row["id"],
                row.get("name"),
                row.get("status"),
                row.get("node_count"),
                row.get("restarts"),
                yuan(row.get("cost_fen")),
                _moment(row.get("started_at")),
            ]
            for row in rows
        ],
        ctx.out,
    )


def _job_human(ctx: Context, row: dict[str, Any]) -> None:
    fields(
        [
            ("ID", row["id"]),
            ("Name", row.get("name")),
            ("Status", row.get("status")),
            ("Nodes", row.get("node_count")),
            ("Restarts", row.get("restarts")),
            ("Exit code", row.get("exit_code")),
            ("Cost so far", yuan(row.get("cost_fen"))),
            ("Started", _moment(row.get("started_at"))),
            ("Finished", _moment(row.get("finished_at"))),
        ],
        ctx.out,
    )
    ranks = row.get("ranks") or []
    if ranks:
        ctx.out.write("\n")
        table(
            ["RANK", "NODE", "STATUS"],
            [[r.get("rank"), r.get("node"), r.get("status")] for r in ranks],
            ctx.out,
        )


def _read_text(path: str, what: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise CliError(f"cannot read {what} {path}: {reason}", USAGE) from error


def _job_order(ctx: Context) -> dict[str, Any]:
    """The order of `submit`'s flags and its command after `--` (or --script)."""
    args, client = ctx.args, ctx.client
    if not args.image or not args.offering:
        raise CliError("give --image and --offering and a command after `--`, or -f TASK", USAGE)
    command = list(args.remote)
    if bool(command) == bool(args.script):
        raise CliError("give the command after `--`, or --script FILE: one of them", USAGE)
    offering = args.offering
    if not offering.startswith("off_"):
        offering = _resolve(ctx.settings_client(auth=False), "offerings", offering, "offering")
    body: dict[str, Any] = {"image": args.image, "offering": offering}
    if command:  # one word is a shell line as it is; several are joined, quoted as typed
        body["command"] = command[0] if len(command) == 1 else shlex.join(command)
    else:
        body["script"] = _read_text(args.script, "the script")
    optional = {
        "name": args.name,
        "node_count": args.nodes,
        "env": dict(args.env) if args.env else None,
        "checkpoint_dir": args.checkpoint_dir,
        "max_restarts": args.max_restarts,
        "time_limit_minutes": args.time_limit,
        "template": args.template,
        "nas": True if args.nas else None,
    }
    body.update({key: value for key, value in optional.items() if value is not None})
    if args.disk:
        body["disks"] = [_resolve(client, "disks", disk, "disk") for disk in args.disk]
    return body


def _workdir_hint(ctx: Context, task: str) -> None:
    """A task's `workdir` is not uploaded (there is no upload API yet): say where it must be."""
    match = _WORKDIR.search(task)
    if not match:
        return
    folder = match.group(1).strip("'\"")
    ctx.note(
        f"workdir {folder} is not uploaded: the job runs in /nas/workdir/<name> on your NAS (the "
        "answer's note names the folder), so copy it there first, through a running instance "
        f"(it mounts the NAS at /nas): starverse cp {folder}/ INSTANCE:/nas/workdir/<name>"
    )


def _dry_run_said(ctx: Context, answer: dict[str, Any]) -> None:
    """A job's dry run, for a person: the refusal the real order would get, else its quote;
    then what of the task would not be honoured."""
    refusal, quote = answer.get("refusal"), answer.get("quote")
    if refusal:
        ctx.out.write(f"would be refused ({refusal['code']}): {refusal['detail']}\n")
    elif quote:
        start = "starts at once" if quote.get("expected_start_s") == 0 else "would wait"
        if quote.get("queue_position"):
            start = f"would wait, #{quote['queue_position']} in the queue"
        runway = quote.get("runway_hours")
        ctx.out.write(
            f"would be taken: {yuan(quote['price_per_hour_fen'])}/h paid by {quote['paid_by']}, "
            f"{start}; runway {'-' if runway is None else f'{runway} h'}\n"
        )
    for note in answer.get("notes") or []:
        ctx.out.write(f"note: {note}\n")


def cmd_jobs_submit(ctx: Context) -> int:
    args = ctx.args
    headers = {"Idempotency-Key": args.idempotency_key or str(uuid.uuid4())}
    query = {"dry_run": "true"} if args.dry_run else None
    if args.file:
        given = [name for name in ORDER_FLAGS if getattr(args, name) not in (None, False)]
        if given or args.remote:
            flags = ", ".join(f"--{name.replace('_', '-')}" for name in given) or "--"
            raise CliError(
                f"-f sends the task as it is: leave out {flags} (say it in the task)", USAGE
            )
        task = _read_text(args.file, "the task")
        _workdir_hint(ctx, task)
        content = (task.encode(), "text/yaml")
        row = ctx.client.request("POST", "jobs", headers=headers, content=content, query=query)
    else:
        row = ctx.client.post("jobs", _job_order(ctx), headers=headers, query=query)
    if args.dry_run:
        ctx.emit(row, lambda: _dry_run_said(ctx, row))
        return OK

    def human() -> None:
        ctx.out.write(f"{row['id']}: {row.get('status')}\n")
        for note in row.get("notes") or []:
            ctx.out.write(f"note: {note}\n")

    ctx.emit(row, human)
    return OK


def cmd_jobs_ls(ctx: Context) -> int:
    """The jobs, newest first. `--status` is applied here: the API lists every job (a server
    that filters by `?status=` only makes the list shorter)."""
    status = ctx.args.status
    rows = [
        row
        for row in ctx.client.list_all("jobs", status=status)
        if status is None or row.get("status") == status
    ]
    ctx.emit(rows, lambda: _job_rows(ctx, rows))
    return OK


def cmd_jobs_show(ctx: Context) -> int:
    row = ctx.client.get(f"jobs/{ctx.args.id}")
    if ctx.json:
        dump_json(row, ctx.out)
        return OK
    _job_human(ctx, row)
    events = ctx.client.list_all(f"jobs/{ctx.args.id}/events")
    if events:
        ctx.out.write("\n")
        table(
            ["AT", "STATUS", "EVENT"],
            [[_moment(e.get("at")), e.get("status"), e.get("text")] for e in events[-10:]],
            ctx.out,
        )
    return OK


def _write_log(ctx: Context, query: dict[str, Any]) -> None:
    """One answer of the logs route, written out as it comes."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    follow = query.get("follow") is not None
    chunks = ctx.client.stream(
        f"jobs/{ctx.args.id}/logs", query, timeout=None if follow else TIMEOUT_S
    )
    for chunk in chunks:
        ctx.out.write(decoder.decode(chunk))
        ctx.out.flush()
    ctx.out.write(decoder.decode(b"", final=True))


def _follow_job(ctx: Context) -> None:
    """Follow the rank until the job ends. A job not started yet is waited for (the API has no
    output for it yet); each attempt after a restart is followed from its first line; a stream
    the server ended while the job still runs goes on with new lines only: at once when it had
    been open a while (the program was quiet for the server's JOB_LOG_FOLLOW_S), after a poll
    interval when it ended at once (the program has ended; the platform notices in seconds)."""
    args, path = ctx.args, f"jobs/{ctx.args.id}"
    interval = float(os.environ.get("STARVERSE_POLL_INTERVAL", "2"))
    job: dict[str, Any] = ctx.client.get(path)
    attempt, tail, brief = None, args.tail, False
    while True:
        if job.get("status") not in JOB_LOGGING:
            job = _wait(ctx, path, JOB_LOGGING, set(), float("inf"), read=job)
        if job.get("restarts") != attempt:
            if attempt is not None:
                ctx.note(f"{job['id']}: attempt {job.get('restarts')}")
                tail = None
            attempt = job.get("restarts")
        else:
            tail = 0
            if brief:
                time.sleep(interval)
        opened = time.monotonic()
        _write_log(ctx, {"rank": args.rank, "tail": tail, "follow": 1})
        brief = time.monotonic() - opened < FOLLOW_BRIEF_S
        if job.get("status") in JOB_END:
            return  # its kept output was written whole
        job = ctx.client.get(path)
        if job.get("status") in JOB_END:
            return


def cmd_jobs_logs(ctx: Context) -> int:
    """A rank's log; with -f it follows, written out as it comes, until the job ends (or
    Ctrl-C, which ends it quietly)."""
    args = ctx.args
    try:
        if args.follow:
            _follow_job(ctx)
        else:
            _write_log(ctx, {"rank": args.rank, "tail": args.tail})
    except KeyboardInterrupt:
        return INTERRUPTED
    return OK


def cmd_jobs_cancel(ctx: Context) -> int:
    _confirm(
        ctx,
        f"Cancel job {ctx.args.id}? Its GPUs are released now; its logs and its disks' data are "
        "kept.",
    )
    row = ctx.client.delete(f"jobs/{ctx.args.id}")
    ctx.emit(row, lambda: ctx.out.write(f"{row['id']}: {row.get('status')}\n"))
    return OK


# ---------------------------------------------------------------- billing


def cmd_balance(ctx: Context) -> int:
    row = ctx.client.get("billing/balance")
    pairs: list[tuple[str, Any]] = [
        ("Balance", yuan(row.get("total_fen"))),
        ("Cash", yuan(row.get("cash_fen"))),
        ("Trial credit", yuan(row.get("promo_fen"))),
    ]
    if row.get("pending_fen"):
        # already taken off the figures above; the ledger gets it by the hour
        pairs.append(("Used, not yet posted", yuan(row["pending_fen"])))
    if row.get("arrears_fen"):
        pairs.append(("Arrears", yuan(row["arrears_fen"])))
    if row.get("on_hold"):
        pairs.append(("On hold", "yes: new rentals are refused until support lifts it"))
    ctx.emit(row, lambda: fields(pairs, ctx.out))
    return OK


def cmd_topup(ctx: Context) -> int:
    try:
        amount_fen = parse_yuan(ctx.args.amount)
    except ValueError as error:
        raise CliError(str(error), USAGE) from error
    body: dict[str, Any] = {"amount_fen": amount_fen}
    if ctx.args.method:
        body["payment_method"] = ctx.args.method
    # The key names this invocation in the server's logs, but top-ups do not dedupe on it, so a
    # network error is not retried: a second checkout would open (nothing is paid until paid).
    headers = {"Idempotency-Key": str(uuid.uuid4())}
    row = ctx.client.request("POST", "billing/topups", body=body, headers=headers, repeatable=False)
    if ctx.json:
        dump_json(row, ctx.out)
        return OK
    ctx.note(f"Top-up {row['id']} of {yuan(row['amount_fen'])}: pay on this page.")
    ctx.out.write(f"{row['checkout_url']}\n")
    return OK


# ---------------------------------------------------------------- completion


def cmd_mcp(ctx: Context) -> int:
    """A Model Context Protocol server on stdin/stdout, for coding agents (mcp_server)."""
    client = ctx.client  # logged in first: the tools act with this profile's token
    try:
        from starverse_cli.mcp_server import serve
    except ImportError:
        raise CliError(
            "`starverse mcp` needs the MCP SDK: pip install 'starverse-cli[mcp]'"
        ) from None
    serve(client)
    return OK


def cmd_completion(ctx: Context) -> int:
    parser = build_parser()
    ctx.out.write(completion.script(parser, ctx.args.shell))
    return OK


# ---------------------------------------------------------------- the parser


def _common() -> argparse.ArgumentParser:
    """Options every command takes, also after its name (`starverse ls --json`,
    `starverse login --api-url …`)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print the API's JSON instead of tables",
    )
    common.add_argument("--profile", default=argparse.SUPPRESS, help="config profile to use")
    common.add_argument(
        "--api-url",
        default=argparse.SUPPRESS,
        help="the server (default: STARVERSE_API_URL, the profile)",
    )
    return common


def _wait_options(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--wait", action="store_true", help=f"wait until {what}")
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds --wait waits (default 600)"
    )


def _idle_options(parser: argparse.ArgumentParser, note: str) -> None:
    idle = parser.add_mutually_exclusive_group()
    idle.add_argument(
        "--idle-stop",
        type=idle_stop,
        metavar="PCT:MINUTES",
        help=f"stop once every GPU has been below PCT percent for MINUTES ({note})",
    )
    idle.add_argument("--no-idle-stop", action="store_true", help="no idle auto-stop")


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="starverse",
        description="Rent GPUs on Starverse from the command line.",
        epilog="Exit codes: 0 ok, 1 API error, 2 usage, 3 authentication, 4 not found, "
        "5 payment required, 6 conflict, 7 timeout or network.",
    )
    parser.add_argument("--version", action="version", version=f"starverse-cli {__version__}")
    parser.add_argument("--json", action="store_true", help="print the API's JSON")
    parser.add_argument(
        "--profile", default=os.environ.get("STARVERSE_PROFILE"), help="config profile to use"
    )
    parser.add_argument("--api-url", help="the server (default: STARVERSE_API_URL, the profile)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(
        sub: Any, name: str, handler: Callable[[Context], int], text: str
    ) -> argparse.ArgumentParser:
        made: argparse.ArgumentParser = sub.add_parser(
            name, parents=[common], help=text, description=text
        )
        made.set_defaults(handler=handler)
        return made

    login = add(commands, "login", cmd_login, "save an API token for this profile")
    login.add_argument("--token", help="an API token (sv_…); without it, asked for")
    login.add_argument("--email", help="log in with e-mail and password; makes a token")
    login.add_argument("--password-stdin", action="store_true", help="read the password on stdin")
    login.add_argument("--otp", help="the authenticator code, if the account has one")
    login.add_argument(
        "--team",
        help="act for this team (id or exact name): with --email a token of the team is made; "
        "a given token must be the team's",
    )
    login.add_argument(
        "--token-name", default=f"starverse-cli@{platform.node() or 'host'}"[:100], help="its name"
    )
    add(commands, "logout", cmd_logout, "forget this profile's token")
    add(commands, "whoami", cmd_whoami, "the account the token belongs to")

    add(commands, "offerings", cmd_offerings, "what can be rented, prices and free capacity")

    rent = add(commands, "rent", cmd_rent, "rent an instance")
    rent.add_argument("offering", help="an offering id (off_…) or its exact name")
    rent.add_argument("--image", required=True, help="image id, e.g. pytorch-2.1")
    rent.add_argument("--name", help="a name for the instance")
    rent.add_argument("--disk", action="append", help="attach a cloud disk (id or name)")
    rent.add_argument("--ssh-key", action="append", help="only this SSH key (id or name)")
    rent.add_argument("--port", action="append", type=int, help="an HTTP port to publish")
    rent.add_argument("--region", help="a region (default: any with room)")
    rent.add_argument("--monthly", action="store_true", help="monthly billing (whole nodes)")
    rent.add_argument("--idempotency-key", help="default: a new one per invocation")
    rent.add_argument(
        "--stop-after", type=stop_after_hours, metavar="HOURS", help="stop this many hours from now"
    )
    _idle_options(rent, "default: the account's settings")
    _wait_options(rent, "it runs")

    clone = add(commands, "clone", cmd_clone, "a new instance with a copy of this one's disks")
    clone.add_argument("id")
    clone.add_argument("--name", help='a name (default: "NAME (clone)")')
    clone.add_argument("--offering", help="another offering (id or exact name), disks no smaller")
    clone.add_argument("--region", help="its source's region only (the default)")
    clone.add_argument("--idempotency-key", help="default: a new one per invocation")
    _wait_options(clone, "it runs")

    change = add(commands, "set", cmd_set, "set or clear an instance's automatic stops")
    change.add_argument("id")
    scheduled = change.add_mutually_exclusive_group()
    scheduled.add_argument(
        "--stop-after", type=stop_after_hours, metavar="HOURS", help="stop this many hours from now"
    )
    scheduled.add_argument(
        "--stop-at", type=stop_at, metavar="TIME", help="stop at this ISO 8601 time (local time)"
    )
    scheduled.add_argument("--no-stop-at", action="store_true", help="clear the scheduled stop")
    _idle_options(change, "idle time counts afresh from now")

    ls = add(commands, "ls", cmd_ls, "list instances")
    ls.add_argument("--status", help="only this status")
    ls.add_argument("-a", "--all", action="store_true", help="terminated ones too")

    show = add(commands, "show", cmd_show, "an instance in detail, with its recent events")
    show.add_argument("id")

    ssh = add(commands, "ssh", cmd_ssh, "ssh into a running instance (host key pinned)")
    ssh.add_argument("id")
    ssh.add_argument("-i", "--identity", help="private key file for ssh -i")
    ssh.add_argument("-o", "--option", action="append", help="an ssh -o option, repeatable")
    ssh.add_argument(
        "--print-command", action="store_true", help="print the ssh command instead of running it"
    )
    # the remote command follows `--` and is split off before parsing (main): argparse would
    # give an optional positional nothing once options follow the id
    ssh.usage = "starverse ssh [-h] [--json] [-i IDENTITY] [-o OPTION] ID [-- COMMAND ...]"

    cp = add(
        commands,
        "cp",
        cmd_cp,
        "copy files and folders to or from an instance (host key pinned, resumable)",
    )
    cp.add_argument("source", nargs="+", help="local paths, or INSTANCE:PATH on the instance")
    cp.add_argument("dest", help="INSTANCE:PATH, or a local path")
    cp.add_argument("-i", "--identity", help="private key file for ssh -i")
    cp.add_argument("-o", "--option", action="append", help="an ssh -o option, repeatable")
    cp.add_argument(
        "--no-rsync",
        action="store_true",
        help="copy over plain ssh even where rsync is on both ends",
    )

    for name, handler, text, what in (
        ("stop", cmd_stop, "stop an instance (its disk is kept)", "it is stopped"),
        ("start", cmd_start, "start a stopped instance", "it runs"),
    ):
        action = add(commands, name, handler, text)
        action.add_argument("id")
        _wait_options(action, what)

    rm = add(commands, "rm", cmd_rm, "terminate an instance")
    rm.add_argument("id")
    rm.add_argument("-y", "--yes", action="store_true", help="do not ask")
    rm.add_argument("--keep-disk", action="store_true", help="keep its disk as a cloud disk")
    _wait_options(rm, "it is terminated")

    keys = commands.add_parser("keys", parents=[common], help="SSH keys instances accept")
    key_commands = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    add(key_commands, "ls", cmd_keys_ls, "list your SSH public keys")
    key_add = add(key_commands, "add", cmd_keys_add, "add an SSH public key")
    key_add.add_argument(
        "file", nargs="?", help="a .pub file, - for stdin (default: ~/.ssh/id_ed25519.pub …)"
    )
    key_add.add_argument("--name", help="a name for it (default: the key's comment)")
    key_rm = add(key_commands, "rm", cmd_keys_rm, "remove an SSH key")
    key_rm.add_argument("key", help="its id or name")
    key_rm.add_argument("-y", "--yes", action="store_true", help="do not ask")

    disks = commands.add_parser("disks", parents=[common], help="cloud disks")
    disk_commands = disks.add_subparsers(dest="disks_command", metavar="ACTION", required=True)
    add(disk_commands, "ls", cmd_disks_ls, "list cloud disks")
    create = add(disk_commands, "create", cmd_disks_create, "create a cloud disk")
    create.add_argument("name")
    create.add_argument("size_gb", type=int)
    create.add_argument("--region")
    resize = add(disk_commands, "resize", cmd_disks_resize, "grow a cloud disk")
    resize.add_argument("id")
    resize.add_argument("size_gb", type=int, help="the new size in GB (disks only grow)")
    disk_rm = add(disk_commands, "rm", cmd_disks_rm, "delete a detached disk and its data")
    disk_rm.add_argument("id")
    disk_rm.add_argument("-y", "--yes", action="store_true", help="do not ask")
    for name, handler, text in (
        ("attach", cmd_disks_attach, "attach a disk to an instance"),
        ("detach", cmd_disks_detach, "detach a disk from an instance"),
    ):
        action = add(disk_commands, name, handler, text)
        action.add_argument("disk")
        action.add_argument("instance")
        action.add_argument(
            "--restart", action="store_true", help="allow a running instance to restart"
        )

    clusters = commands.add_parser("clusters", parents=[common], help="multi-node clusters")
    cluster_commands = clusters.add_subparsers(
        dest="clusters_command", metavar="ACTION", required=True
    )
    add(cluster_commands, "ls", cmd_clusters_ls, "list clusters")
    order = add(cluster_commands, "create", cmd_clusters_create, "order a cluster")
    order.add_argument("offering", help="a whole-node offering id or exact name")
    order.add_argument("--nodes", type=int, required=True, help="whole nodes, one rank each")
    order.add_argument("--image", required=True)
    order.add_argument(
        "--template",
        default="torchrun",
        choices=["torchrun", "deepspeed", "megatron", "colossalai", "none"],
    )
    order.add_argument("--name")
    order.add_argument("--ssh-key", action="append", help="only this SSH key (id or name)")
    order.add_argument("--region")
    order.add_argument("--monthly", action="store_true")
    order.add_argument("--idempotency-key")
    _wait_options(order, "every rank runs")
    for name, handler, text, what in (
        ("show", cmd_clusters_show, "a cluster, its ranks and launch commands", ""),
        ("stop", cmd_clusters_stop, "stop every rank", "it is stopped"),
        ("start", cmd_clusters_start, "start every rank", "it runs"),
    ):
        action = add(cluster_commands, name, handler, text)
        action.add_argument("id")
        if what:
            _wait_options(action, what)
    scale = add(cluster_commands, "scale", cmd_clusters_scale, "change a stopped cluster's nodes")
    scale.add_argument("id")
    scale.add_argument("nodes", type=int, help="the new node count")
    scale.add_argument(
        "--keep-disks",
        action="store_true",
        help="scaling down: keep the removed ranks' own disks as cloud disks",
    )
    cluster_rm = add(cluster_commands, "rm", cmd_clusters_rm, "terminate a cluster")
    cluster_rm.add_argument("id")
    cluster_rm.add_argument("-y", "--yes", action="store_true", help="do not ask")

    jobs = commands.add_parser(
        "jobs", parents=[common], help="training jobs: run to the end, resume after a failure"
    )
    job_commands = jobs.add_subparsers(dest="jobs_command", metavar="ACTION", required=True)
    submit = add(
        job_commands,
        "submit",
        cmd_jobs_submit,
        "submit a job: flags and a command after --, or a SkyPilot task YAML (-f)",
    )
    submit.add_argument(
        "-f", "--file", metavar="TASK", help="a SkyPilot task YAML, sent as it is (- for stdin)"
    )
    submit.add_argument("--name", help="a name for the job")
    submit.add_argument("--image", help="image id, e.g. pytorch-2.1")
    submit.add_argument("--offering", help="an offering id (off_…) or its exact name")
    submit.add_argument("--nodes", type=int, help="nodes, one rank each (several: whole nodes)")
    submit.add_argument(
        "--env", action="append", type=env_pair, metavar="NAME=VALUE", help="repeatable"
    )
    submit.add_argument("--checkpoint-dir", help="default: a folder of the job on the NAS")
    submit.add_argument("--max-restarts", type=int, help="after a failure (default 3)")
    submit.add_argument("--time-limit", type=int, metavar="MINUTES", help="stop it after this")
    submit.add_argument("--template", choices=JOB_TEMPLATES, help="the multi-node launcher")
    submit.add_argument("--disk", action="append", help="attach a cloud disk (id or name)")
    submit.add_argument("--nas", action="store_true", help="mount the account's NAS at /nas")
    submit.add_argument("--script", metavar="FILE", help="a bash script to run, not a command")
    submit.add_argument("--idempotency-key", help="default: a new one per invocation")
    submit.add_argument(
        "--dry-run",
        action="store_true",
        help="only say what it would cost and whether it would be taken; nothing is created",
    )
    submit.usage = (
        "starverse jobs submit [-h] [--json] [--dry-run] (-f TASK | --image IMAGE "
        "--offering OFFERING [options] -- COMMAND ...)"
    )
    job_ls = add(job_commands, "ls", cmd_jobs_ls, "list jobs")
    job_ls.add_argument("--status", help="only this status")
    job_show = add(job_commands, "show", cmd_jobs_show, "a job, its ranks and its recent events")
    job_show.add_argument("id")
    logs = add(job_commands, "logs", cmd_jobs_logs, "a rank's log (-f follows it)")
    logs.add_argument("id")
    logs.add_argument("--rank", type=int, help="which rank (default: the server's, rank 0)")
    logs.add_argument("--tail", type=int, metavar="N", help="only the last N lines")
    logs.add_argument("-f", "--follow", action="store_true", help="follow until the rank ends")
    job_cancel = add(job_commands, "cancel", cmd_jobs_cancel, "cancel a job")
    job_cancel.add_argument("id")
    job_cancel.add_argument("-y", "--yes", action="store_true", help="do not ask")

    add(commands, "balance", cmd_balance, "the account's balance")
    topup = add(commands, "topup", cmd_topup, "top up: prints the checkout page to pay on")
    topup.add_argument("amount", help="in yuan, e.g. 100 or 99.50")
    topup.add_argument("--method", choices=["card", "alipay", "wechat_pay"], help="pay with")

    add(commands, "mcp", cmd_mcp, "serve the Model Context Protocol on stdio, for coding agents")
    shell = add(commands, "completion", cmd_completion, "print a shell completion script")
    shell.add_argument("shell", choices=list(completion.SHELLS))
    return parser


def _report(error: ApiError, err: TextIO) -> int:
    code = f" [{error.code}]" if error.code else ""
    err.write(f"starverse: {error.detail}{code}\n")
    for field, messages in (error.errors or {}).items():
        listed = messages if isinstance(messages, list) else [messages]
        for message in listed:
            err.write(f"  {field}: {message}\n")
    if error.status == 401:
        err.write("  (log in again: starverse login, or set STARVERSE_TOKEN)\n")
    return STATUS_EXIT.get(error.status, API_ERROR)


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    words = list(sys.argv[1:] if argv is None else argv)
    remote: list[str] = []
    if "--" in words:
        cut = words.index("--")
        words, remote = words[:cut], words[cut + 1 :]
    try:
        args = parser.parse_args(words)
        if remote and (args.command, getattr(args, "jobs_command", None)) not in TAKE_COMMAND:
            parser.error(
                "`--` and a command after it are for `starverse ssh` and `starverse jobs submit`"
            )
    except SystemExit as exit_:
        return int(exit_.code or 0)
    args.remote = remote
    try:
        config = Config(config_dir())
        ctx = Context(args=args, config=config, out=out, err=err)
        return int(args.handler(ctx))
    except ApiError as error:
        return _report(error, err)
    except NetworkError as error:
        err.write(f"starverse: {error}\n")
        return TIMEOUT
    except (CliError, ConfigError) as error:
        err.write(f"starverse: {error}\n")
        return error.code if isinstance(error, CliError) else API_ERROR
    except KeyboardInterrupt:
        err.write("\n")
        return INTERRUPTED
