"""Generated from the URL configuration: every operation under /api/v1/ is called for real, as
its user, as another tenant, as staff where it is staff-only, without credentials, throttled,
with odd path parameters (a control character, non-ASCII, a very long value, a slash), a NUL
byte in the query string, an Accept header it cannot satisfy and a body that is not JSON. Every
answer must carry a status code that the operation declares and a body that validates against
the declared schema, with no key the schema leaves out; and every code an operation declares
must be provoked, so the schema neither hides answers nor promises ones that never come. A new
route fails here until it has a @case below."""

import json
import re
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pyotp
import pytest
from django.core.files.base import ContentFile
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient
from rest_framework.throttling import SimpleRateThrottle

from billing.calculator import presets_shown
from billing.choices import TransactionKind
from billing.holds import hold_lift, hold_place
from billing.invoices import invoice_issue, invoice_profile_save, invoice_request
from billing.models import Wallet
from billing.onboarding import team_create
from billing.services import ledger_post
from billing.statements import parse_month, statement_for
from clusters.preflight import preflight_run
from clusters.services import cluster_stop
from compute.models import Offering
from datasets.services import public_dataset_upsert
from devstack.stripe import StripeFake
from endpoints.services import endpoint_delete, endpoint_suspend, key_create
from events.webhooks import webhook_test
from fleet.api.views import MAX_REPORT_BYTES
from fleet.models import Node
from fleet.services import node_token_issue, report_ingest
from fleet.telemetry import report_parse
from instances.gateway import share_create
from instances.lifecycle import instance_stop, instance_terminate
from instances.models import Instance
from instances.provisioning import converge
from instances.volumes import disk_attach
from jobs.models import Job
from jobs.services import JobRequest, job_submit
from nodeagent.fixture import open_fixture_source
from nodeagent.report import build_report, pending_report
from nodeagent.source import iso_utc, utc_now
from starverse.accounts.models import ApiToken
from starverse.accounts.services import MAX_TOKENS_PER_USER, token_create
from starverse.accounts.teams import invitation_accept, invitation_create, invitation_token
from starverse.accounts.verification import verification_token
from starverse.core.api.schema import PERSON_KEYED_NOTE
from storage.disks import disk_create
from storage.models import Disk, StoragePrice
from storage.nas import nas_delete, nas_set_size
from tests.api.openapi import Route, api_routes, code_schema, problems
from tests.factories import (
    PASSWORD,
    _topup,
    converge_until,
    ed25519_public_key,
    enrol_totp,
    fund,
    make_channel,
    make_cluster,
    make_disk,
    make_endpoint,
    make_image,
    make_instance,
    make_operator,
    make_public_model,
    make_ssh_key,
    make_token,
    make_user,
    make_webhook,
)

AGENT_FIXTURES = Path(__file__).resolve().parents[2] / "nodeagent" / "fixtures"
UNSAFE = ("post", "put", "patch", "delete")
ROUTES = api_routes()
# Path parameters of no id's form, percent-encoded as a client sends them: a C1 control
# character, non-ASCII, one far longer than any id, and one with a slash (which no route has).
ODD_PATH_VALUES = ("%C2%84", "%C3%A9t%C3%A9-%E4%B8%AD", "x" * 2_000, "a%2Fb")


def _operation(route: Route) -> dict[str, Any] | None:
    return code_schema()["paths"].get(route.path, {}).get(route.method)


def token_client(user: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(user)[1]}")
    return client


class Probe:
    """Real requests to one operation, each checked against what the operation declares."""

    def __init__(self, route: Route, operation: dict[str, Any], who: str, request: Any) -> None:
        self.route, self.operation, self.who = route, operation, who
        self.request = request
        self.settings = request.getfixturevalue("settings")
        self.finalizers = request.addfinalizer
        self.user = make_user()
        self.client = token_client(self.user)
        self.seen: set[int] = set()

    @cached_property
    def staff(self) -> APIClient:
        return token_client(make_operator())

    def stranger(self) -> APIClient:
        return token_client(make_user())

    def cluster(self) -> None:
        """The platform on the session's kube emulator, the catalog seeded and the fleet synced
        from it: for an instance that must run."""
        self.request.getfixturevalue("catalog")

    def payments(self) -> StripeFake:
        """The platform's payments on the session's Stripe stand-in."""
        return self.request.getfixturevalue("payments")

    @property
    def default(self) -> APIClient:
        if self.who == "staff":
            return self.staff
        return self.client if self.who == "user" else APIClient()

    def call(
        self,
        expect: int,
        *,
        client: APIClient | None = None,
        params: dict[str, str] | None = None,
        query: dict[str, Any] | None = None,
        body: Any = None,
        raw: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        path = fill(self.route.path, params or {})
        if query:
            path += "?" + urlencode(query)
        if (
            200 <= expect < 300
            and body is not None
            and 415 not in self.seen
            and ("415" in self.operation["responses"])
        ):
            # where a JSON body would be taken, the same request with another media type is not
            not_json = self.send(
                client or self.default, path, raw="name=x", headers=headers, media="text/plain"
            )
            self.check(415, not_json, path)
        response = self.send(client or self.default, path, body=body, raw=raw, headers=headers)
        self.check(expect, response, path)
        if 200 <= expect < 300 and body is not None and "requestBody" in self.operation:
            schema = self.operation["requestBody"]["content"]["application/json"]["schema"]
            found = problems(schema, body, closed=False)
            assert not found, (
                f"{self.route} ({path}): an accepted request body breaks its schema: {found}"
            )
        return response

    def check(self, expect: int, response: Any, path: str) -> None:
        """The answer has the expected status, which the operation declares, with a body of
        the declared media type and schema."""
        where = f"{self.route} ({path[:200]})"
        assert response.status_code == expect, (where, response.status_code, response.content)
        declared = self.operation["responses"].get(str(expect))
        assert declared is not None, f"{where} answered {expect}, which its schema does not declare"
        if "content" in declared:
            media = response["Content-Type"].split(";")[0]
            assert media in declared["content"], f"{where} {expect}: {media} is not declared"
            if media == "application/json":
                schema = declared["content"][media]["schema"]
                found = problems(schema, response.json(), closed=True)
                assert not found, f"{where} {expect}: the body is not what the schema says: {found}"
        else:
            assert response.content == b"", f"{where} {expect}: a body the schema does not declare"
        self.seen.add(expect)

    def send(
        self,
        client: APIClient,
        path: str,
        *,
        body: Any = None,
        raw: str | None = None,
        headers: dict[str, str] | None = None,
        media: str = "application/json",
    ) -> Any:
        data = raw if raw is not None else "" if body is None else json.dumps(body)
        extra: dict[str, Any] = {
            f"HTTP_{k.upper().replace('-', '_')}": v for k, v in (headers or {}).items()
        }
        method = self.route.method.upper()
        return client.generic(method, path, data, content_type=media, **extra)


@dataclass(frozen=True)
class Case:
    run: Callable[[Probe], None]
    who: str  # whose requests succeed: "user", "staff", "anon" or "node" (its own header)


CASES: dict[str, Case] = {}


def case(operation_id: str, who: str = "user") -> Callable[[Callable[[Probe], None]], Any]:
    def register(run: Callable[[Probe], None]) -> Callable[[Probe], None]:
        assert operation_id not in CASES, operation_id
        CASES[operation_id] = Case(run, who)
        return run

    return register


@contextmanager
def throttled(monkeypatch: Any) -> Iterator[None]:
    """Every rate limit refuses: the route answers 429 if, and only if, it has one."""
    with monkeypatch.context() as patch:
        patch.setattr(SimpleRateThrottle, "allow_request", lambda self, request, view: False)
        patch.setattr(SimpleRateThrottle, "wait", lambda self: 60.0)
        yield


def common_probes(probe: Probe, monkeypatch: Any) -> None:
    """The answers that follow from how a route is configured, provoked the same way for all."""
    operation, declared = probe.operation, {int(code) for code in probe.operation["responses"]}
    security = operation.get("security", [])
    if 401 in declared and any(security):  # [{}] means that the route reads no credentials
        if {} in security:  # anonymous callers are served; a wrong token is still refused
            wrong = APIClient()
            wrong.credentials(HTTP_AUTHORIZATION="Bearer sv_not_a_token")
            probe.call(401, client=wrong)
        else:
            probe.call(401, client=APIClient())
    if (
        403 in declared
        and probe.route.method in UNSAFE
        and any("cookieAuth" in s for s in security)
    ):
        session = APIClient(enforce_csrf_checks=True)
        session.force_login(probe.user)
        probe.call(403, client=session)
    if PERSON_KEYED_NOTE in operation["responses"].get("403", {}).get("description", ""):
        team = team_create(user=probe.user, name="Walk lab")
        team_token = APIClient()
        plain = token_create(user=probe.user, name="team", team_id=team.pk, scopes=None)[1]
        team_token.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
        assert probe.call(403, client=team_token).json()["code"] == "wrong_team"
    oversized = "x" * (probe.settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)
    assert probe.call(413, raw=oversized).json()["code"] == "too_large"
    assert probe.call(400, query={"q": "\x00"}).json()["code"] == "invalid"
    refused = probe.call(406, headers={"Accept": "application/xml"})
    assert refused.json()["code"] == "not_acceptable"
    assert probe.call(406, query={"format": "xml"}).json()["code"] == "not_acceptable"
    if 404 in declared and any(p["name"] == "page" for p in operation.get("parameters", [])):
        probe.call(404, query={"page": 9999})
    odd_path_parameters(probe)
    with throttled(monkeypatch):
        if 429 in declared:
            probe.call(429)
        else:  # a route that declares no 429 must have no rate limit
            assert probe.send(probe.default, fill(probe.route.path, {})).status_code != 429


def fill(template: str, params: dict[str, str]) -> str:
    """A path of the route, its parameters from `params` or else "unknown"."""
    return re.sub(r"{(\w+)}", lambda m: params.get(m[1], "unknown"), template)


def odd_path_parameters(probe: Probe) -> None:
    """Each path parameter in turn of no id's form: whatever the answer, the operation declares
    it; one with a slash matches no route at all, which is the API's JSON 404."""
    template = probe.route.path
    for name in re.findall(r"{(\w+)}", template):
        for value in ODD_PATH_VALUES:
            path = fill(template, {name: value})
            response = probe.send(probe.default, path)
            probe.check(response.status_code, response, path)
            if "%2F" in value:
                assert (response.status_code, response.json()["code"]) == (404, "not_found")


@pytest.mark.parametrize("route", ROUTES, ids=str)
def test_every_answer_is_declared_and_every_declared_answer_happens(
    route, request, monkeypatch, db
):
    operation = _operation(route)
    assert operation is not None, f"{route} is routed but missing from the schema"
    found = CASES.get(operation["operationId"])
    assert found is not None, (
        f"no test data for {route} ({operation['operationId']}): add a @case to this file"
    )
    probe = Probe(route, operation, found.who, request)

    found.run(probe)
    common_probes(probe, monkeypatch)

    never = {int(code) for code in operation["responses"]} - probe.seen
    assert not never, f"{route} declares {sorted(never)}, which no request provoked"


def test_the_schema_has_exactly_the_routed_operations_and_each_a_case():
    in_schema = {(p, m) for p, item in code_schema()["paths"].items() for m in item}
    ids = [op["operationId"] for r in ROUTES if (op := _operation(r))]

    assert in_schema == {(r.path, r.method) for r in ROUTES}
    assert len(ids) == len(set(ids)), "operation ids must be unique"
    assert set(CASES) == set(ids), set(CASES) ^ set(ids)


# --- test data ------------------------------------------------------------------------------


def _catalog() -> None:
    call_command("seed_catalog", verbosity=0)


def _closed_port(p: Probe) -> int:
    """A port that refuses connections: bound, never listening, until the test ends (so no
    server of another xdist worker is given it meanwhile)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    p.finalizers(sock.close)
    return int(sock.getsockname()[1])


def _agent_report(node: str, fixture: str = "h100_xid79.json") -> dict[str, Any]:
    """A report as the node agent builds it, from a recorded NVML fixture."""
    source = open_fixture_source(AGENT_FIXTURES / fixture)
    try:
        pending = pending_report(source.driver(), source.inventory(), source.sample(), [])
        pending.events.extend(source.events())
    finally:
        source.close()
    return build_report(node, [pending], dropped_reports=0, sent_at=iso_utc(utc_now()))


def _node(name: str = "gpu-h100-07") -> Node:
    return Node.objects.create(
        name=name,
        gpu_product="NVIDIA H100 80GB HBM3",
        gpu_count=8,
        gpu_memory_mb=81559,
        interconnect="nvlink",
    )


def _reporting_node(fixture: str = "h100_xid79.json") -> Node:
    node = _node()
    report = _agent_report(node.name, fixture)
    report_ingest(node=node, report=report_parse(report, node_name=node.name))
    return node


def _on_hold(p: Probe, **call: Any) -> None:
    """The call refused while the account is on hold (a disputed payment), then the hold
    lifted."""
    hold, _created = hold_place(tenant_id=p.user.tenant_id, key="dispute:dp_walk", reason="walk")
    assert p.call(403, **call).json()["code"] == "account_on_hold"
    hold_lift(hold_id=hold.id, reason="walk", actor=make_operator())


def _placed(user: Any, node: Node) -> Instance:
    """An instance the order placed on `node`, the fleet's only node (its task not run)."""
    instance = make_instance(user)
    assert (instance.status, instance.node_id) == ("provisioning", node.pk)
    return instance


# accounts


@case("auth_signup", who="anon")
def _(p: Probe) -> None:
    body = {"email": "new@lab.example.edu.cn", "password": PASSWORD}
    p.call(201, body=body)
    p.call(409, body=body)
    p.call(400, body={"email": "other@lab.example.edu.cn"})


@case("auth_token_create", who="anon")
def _(p: Probe) -> None:
    p.call(201, body={"email": p.user.email, "password": PASSWORD, "name": "ci"})
    p.call(401, body={"email": p.user.email, "password": "not the password at all"})
    p.call(400, body={"email": p.user.email})
    p.call(404, body={"email": p.user.email, "password": PASSWORD, "team": "tnt_none"})
    p.call(403, body={"email": make_operator().email, "password": PASSWORD})
    secret, _codes = enrol_totp(p.user)
    p.call(401, body={"email": p.user.email, "password": PASSWORD})
    otp = pyotp.TOTP(secret).at(time.time() + 30)
    p.call(201, body={"email": p.user.email, "password": PASSWORD, "otp": otp})


@case("me_2fa_retrieve")
def _(p: Probe) -> None:
    p.call(200)
    enrol_totp(p.user)
    p.call(200)


@case("auth_verify_email", who="anon")
def _(p: Probe) -> None:
    token = verification_token(make_user(verified=False))
    p.call(200, body={"token": token})
    p.call(409, body={"token": token})
    p.call(400, body={"token": "not-a-token"})


@case("auth_verify_email_resend")
def _(p: Probe) -> None:
    p.call(202, client=token_client(make_user(verified=False)))
    p.call(409)  # make_user's address is verified


@case("account_settings_retrieve")
def _(p: Probe) -> None:
    assert p.call(200).json()["idle_stop_minutes"] == 30


@case("account_settings_partial_update")
def _(p: Probe) -> None:
    assert p.call(200, body={"idle_stop_minutes": 45}).json()["idle_stop_minutes"] == 45
    p.call(400, body={"idle_warn_minutes": 0})


@case("me_retrieve")
def _(p: Probe) -> None:
    p.call(200)


@case("tokens_list")
def _(p: Probe) -> None:
    p.call(200)


@case("tokens_create")
def _(p: Probe) -> None:
    p.call(201, body={"name": "laptop"})
    p.call(400, body={"name": 5})
    assert p.call(404, body={"name": "lab", "team": "no-such-team"}).json()["code"] == "not_found"
    p.call(404, body={"name": "lab", "team": "0" * 200})
    p.settings.REQUIRE_2FA_FOR_API_TOKENS = True
    p.call(403, body={"name": "without two-factor"})
    p.settings.REQUIRE_2FA_FOR_API_TOKENS = False
    while (
        ApiToken.objects.filter(user=p.user, revoked_at__isnull=True).count() < MAX_TOKENS_PER_USER
    ):
        make_token(p.user)
    p.call(409, body={"name": "one too many"})


@case("tokens_retrieve")
def _(p: Probe) -> None:
    token, _plaintext = make_token(p.user)
    p.call(200, params={"id": token.id})
    p.call(404, params={"id": token.id}, client=p.stranger())


@case("tokens_destroy")
def _(p: Probe) -> None:
    token, _plaintext = make_token(p.user, "old")
    p.call(204, params={"id": token.id})
    p.call(404, params={"id": token.id})


@case("tokens_partial_update")
def _(p: Probe) -> None:
    token, _plaintext = make_token(p.user)
    changed = p.call(200, params={"id": token.id}, body={"max_spend_fen": 5_000}).json()
    assert changed["max_spend_fen"] == 5_000
    p.call(400, params={"id": token.id}, body={"max_spend_fen": -1})
    p.call(400, params={"id": token.id}, body={"max_spend_fen": 2**63})
    p.call(404, params={"id": token.id}, body={"max_spend_fen": 1}, client=p.stranger())


@case("ssh_keys_list")
def _(p: Probe) -> None:
    make_ssh_key(p.user)
    p.call(200)


@case("ssh_keys_create")
def _(p: Probe) -> None:
    key = ed25519_public_key("me@laptop")
    p.call(201, body={"name": "laptop", "public_key": key})
    p.call(409, body={"public_key": key})
    p.call(400, body={"public_key": "ssh-ed25519 not-a-key"})


@case("ssh_keys_retrieve")
def _(p: Probe) -> None:
    key = make_ssh_key(p.user)
    p.call(200, params={"id": key.id})
    p.call(404, params={"id": key.id}, client=p.stranger())


@case("ssh_keys_destroy")
def _(p: Probe) -> None:
    key = make_ssh_key(p.user)
    p.call(204, params={"id": key.id})
    p.call(404, params={"id": key.id})


# teams


def _team(p: Probe) -> Any:
    """A team that the probe's user owns."""
    return team_create(user=p.user, name="Lab")


def _member_of(team: Any, owner: Any, role: str = "member") -> tuple[Any, APIClient]:
    person = make_user()
    invitation = invitation_create(actor=owner, team=team, email=person.email, role=role)
    invitation_accept(user=person, token=invitation_token(invitation))
    return person, token_client(person)


@case("teams_list")
def _(p: Probe) -> None:
    _team(p)
    p.call(200)


@case("teams_create")
def _(p: Probe) -> None:
    p.call(201, body={"name": "Vision group"})
    p.call(400, body={"name": 5})


@case("teams_retrieve")
def _(p: Probe) -> None:
    team = _team(p)
    p.call(200, params={"id": team.pk})
    p.call(404, params={"id": team.pk}, client=p.stranger())


@case("teams_audit_list")
def _(p: Probe) -> None:
    team = _team(p)
    p.call(200, params={"id": team.pk}, query={"action": "team.created"})
    p.call(400, params={"id": team.pk}, query={"from": "yesterday"})
    p.call(404, params={"id": team.pk}, client=p.stranger())


@case("teams_budgets_list")
def _(p: Probe) -> None:
    team = _team(p)
    p.call(200, params={"id": team.pk})
    p.call(404, params={"id": team.pk}, client=p.stranger())


@case("teams_budgets_update")
def _(p: Probe) -> None:
    team = _team(p)
    _person, member = _member_of(team, p.user)
    p.call(200, params={"id": team.pk}, body={"user": None, "monthly_fen": 10_000})
    p.call(400, params={"id": team.pk}, body={"monthly_fen": "lots"})
    p.call(403, params={"id": team.pk}, body={"monthly_fen": 1}, client=member)
    p.call(404, params={"id": team.pk}, body={"monthly_fen": 1}, client=p.stranger())


@case("teams_invitations_list")
def _(p: Probe) -> None:
    team = _team(p)
    invitation_create(actor=p.user, team=team, email="li@lab.example.edu.cn", role="member")
    p.call(200, params={"id": team.pk})
    p.call(404, params={"id": team.pk}, client=p.stranger())


@case("teams_invitations_create")
def _(p: Probe) -> None:
    team = _team(p)
    person, member = _member_of(team, p.user)
    p.call(201, params={"id": team.pk}, body={"email": "li@lab.example.edu.cn", "role": "admin"})
    p.call(400, params={"id": team.pk}, body={"email": 5})
    p.call(403, params={"id": team.pk}, body={"email": "x@lab.example.edu.cn"}, client=member)
    p.call(409, params={"id": team.pk}, body={"email": person.email})
    p.call(404, params={"id": team.pk}, body={"email": "y@lab.example.edu.cn"}, client=p.stranger())


@case("teams_invitations_destroy")
def _(p: Probe) -> None:
    team = _team(p)
    person, member = _member_of(team, p.user)
    pending = invitation_create(
        actor=p.user, team=team, email="z@lab.example.edu.cn", role="member"
    )
    used = team.invitations.get(email=person.email)
    p.call(403, params={"id": team.pk, "invitation": pending.pk}, client=member)
    p.call(204, params={"id": team.pk, "invitation": pending.pk})
    p.call(409, params={"id": team.pk, "invitation": used.pk})
    p.call(404, params={"id": team.pk, "invitation": "inv_unknown"})


@case("teams_invitations_accept")
def _(p: Probe) -> None:
    owner = make_user()
    team = team_create(user=owner, name="Other lab")
    mine = invitation_create(actor=owner, team=team, email=p.user.email, role="member")
    theirs = invitation_create(actor=owner, team=team, email="w@lab.example.edu.cn", role="member")
    p.call(400, params={"token": "not-a-link"})
    p.call(403, params={"token": invitation_token(theirs)})
    p.call(201, params={"token": invitation_token(mine)})
    p.call(409, params={"token": invitation_token(mine)})


@case("teams_members_list")
def _(p: Probe) -> None:
    team = _team(p)
    p.call(200, params={"id": team.pk})
    p.call(404, params={"id": team.pk}, client=p.stranger())


@case("teams_members_update")
def _(p: Probe) -> None:
    team = _team(p)
    person, member = _member_of(team, p.user)
    ids = {"id": team.pk, "user": person.pk}
    p.call(403, params=ids, body={"role": "admin"}, client=member)
    p.call(200, params=ids, body={"role": "admin"})
    p.call(400, params=ids, body={"role": "boss"})
    p.call(409, params={"id": team.pk, "user": p.user.pk}, body={"role": "member"})
    p.call(404, params={"id": team.pk, "user": "usr_unknown"}, body={"role": "member"})


@case("teams_members_destroy")
def _(p: Probe) -> None:
    team = _team(p)
    person, member = _member_of(team, p.user)
    other, _client = _member_of(team, p.user)
    p.call(403, params={"id": team.pk, "user": other.pk}, client=member)
    p.call(204, params={"id": team.pk, "user": person.pk})
    p.call(409, params={"id": team.pk, "user": p.user.pk})
    p.call(404, params={"id": team.pk, "user": "usr_unknown"})


@case("teams_transfers_create")
def _(p: Probe) -> None:
    team = _team(p)
    _person, member = _member_of(team, p.user)
    fund(p.user, 1_000)
    body = {"amount_fen": 600, "direction": "to_team"}
    p.call(201, params={"id": team.pk}, body=body, headers={"Idempotency-Key": "t1"})
    p.call(
        409,
        params={"id": team.pk},
        body={**body, "amount_fen": 1},
        headers={"Idempotency-Key": "t1"},
    )
    p.call(402, params={"id": team.pk}, body=body)
    p.call(400, params={"id": team.pk}, body={"amount_fen": "6", "direction": "to_team"})
    p.call(
        403, params={"id": team.pk}, body={"amount_fen": 1, "direction": "from_team"}, client=member
    )
    p.call(404, params={"id": team.pk}, body=body, client=p.stranger())


# billing


@case("billing_balance_retrieve")
def _(p: Probe) -> None:
    p.call(200)


@case("billing_ledger_list")
def _(p: Probe) -> None:
    p.call(200)


@case("billing_ledger_retrieve")
def _(p: Probe) -> None:
    row = p.user.tenant.wallet.transactions.get()
    p.call(200, params={"id": row.id})
    p.call(404, params={"id": row.id}, client=p.stranger())


@case("billing_topups_list")
def _(p: Probe) -> None:
    p.payments()
    _topup(p.user)
    p.call(200)


@case("billing_topups_create")
def _(p: Probe) -> None:
    fake = p.payments()
    p.settings.STRIPE_API_BASE = f"http://127.0.0.1:{_closed_port(p)}"
    p.call(503, body={"amount_fen": 10_000})
    p.call(400, body={"amount_fen": 1})
    p.settings.STRIPE_API_BASE = fake.url
    p.call(201, body={"amount_fen": 10_000})


@case("billing_topups_retrieve")
def _(p: Probe) -> None:
    p.payments()
    topup = _topup(p.user)
    p.call(200, params={"id": topup.id})
    p.call(404, params={"id": topup.id}, client=p.stranger())


def _invoicing(p: Probe) -> None:
    """Files under a folder of the test's own; the user's invoice details saved, ¥100 paid."""
    p.settings.MEDIA_ROOT = str(p.request.getfixturevalue("tmp_path"))
    invoice_profile_save(
        tenant_id=p.user.tenant_id,
        data={"title": "清华大学", "tax_number": "91350100M000100Y43", "email": "f@x.cn"},
    )
    fund(p.user, 10_000)


def _issued(p: Probe) -> str:
    item, _created = invoice_request(user=p.user, amount_fen=1_000)
    invoice_issue(
        invoice_id=item.id, actor=make_operator(), pdf=ContentFile(b"%PDF-1.4 x", name="x.pdf")
    )
    return item.id


def _last_month(p: Probe) -> str:
    """The month before this one, which the account is made to have existed in."""
    p.settings.MEDIA_ROOT = str(p.request.getfixturevalue("tmp_path"))
    month = (timezone.localdate().replace(day=1) - timedelta(days=1)).replace(day=1)
    Wallet.objects.filter(tenant_id=p.user.tenant_id).update(
        created_at=timezone.now() - timedelta(days=62)
    )
    return f"{month:%Y-%m}"


def _statement_file(p: Probe) -> None:
    month = _last_month(p)
    p.call(200, params={"month": month})
    p.call(200, params={"month": f"{timezone.localdate():%Y-%m}"})  # the month so far
    ahead = timezone.localdate().replace(day=28) + timedelta(days=5)
    p.call(400, params={"month": f"{ahead:%Y-%m}"})  # not begun
    p.call(404, params={"month": "2001-01"})


@case("billing_invoice_profile_retrieve")
def _(p: Probe) -> None:
    p.call(200)


@case("billing_invoice_profile_update")
def _(p: Probe) -> None:
    body = {"title": "清华大学", "tax_number": "91350100M000100Y43", "email": "f@x.cn"}
    p.call(200, body=body)
    p.call(400, body={**body, "tax_number": "91350100M000100Y42"})


@case("billing_invoices_list")
def _(p: Probe) -> None:
    _invoicing(p)
    invoice_request(user=p.user, amount_fen=1_000)
    p.call(200)


@case("billing_invoices_create")
def _(p: Probe) -> None:
    _invoicing(p)
    p.call(400, body={"amount_fen": 10_001})
    p.call(201, body={"amount_fen": 1_000}, headers={"Idempotency-Key": "walk"})
    p.call(200, body={"amount_fen": 1_000}, headers={"Idempotency-Key": "walk"})
    p.call(409, body={"amount_fen": 2_000}, headers={"Idempotency-Key": "walk"})


@case("billing_invoices_retrieve")
def _(p: Probe) -> None:
    _invoicing(p)
    item, _created = invoice_request(user=p.user, amount_fen=1_000)
    p.call(200, params={"id": item.id})
    p.call(404, params={"id": item.id}, client=p.stranger())


@case("billing_invoices_pdf")
def _(p: Probe) -> None:
    _invoicing(p)
    waiting, _created = invoice_request(user=p.user, amount_fen=500)
    p.call(404, params={"id": waiting.id})
    issued = _issued(p)
    p.call(200, params={"id": issued})
    p.call(404, params={"id": issued}, client=p.stranger())


@case("billing_statements_list")
def _(p: Probe) -> None:
    statement_for(tenant_id=p.user.tenant_id, month=parse_month(_last_month(p)))
    p.call(200)


@case("billing_statements_retrieve")
def _(p: Probe) -> None:
    _statement_file(p)


@case("billing_statements_pdf")
def _(p: Probe) -> None:
    _statement_file(p)


@case("billing_statements_csv")
def _(p: Probe) -> None:
    _statement_file(p)


@case("billing_usage")
def _(p: Probe) -> None:
    p.call(200, query={"from": "2026-11-01", "to": "2026-11-30", "group_by": "day"})
    p.call(200, query={"from": "2026-11-01", "to": "2026-11-30", "format": "csv"})
    p.call(400, query={"from": "2026-11-30", "to": "2026-11-01"})


@case("calculator_tco", who="anon")
def _(p: Probe) -> None:
    _catalog()  # the Starverse column is a catalog offering
    p.call(200, body=presets_shown()[0]["input"])  # its decimals as JSON takes them
    p.call(400, body={"gpus": 8})


# catalog and datasets


@case("gpu_models_list", who="anon")
def _(p: Probe) -> None:
    _catalog()
    p.call(200)


@case("offerings_list", who="anon")
def _(p: Probe) -> None:
    _catalog()
    p.call(200)
    p.call(200, query={"image": "pytorch-2.1"})
    p.call(400, query={"image": "nope"})


@case("images_list", who="anon")
def _(p: Probe) -> None:
    _catalog()
    p.call(200)
    p.call(200, query={"owner": "me"})  # anonymous: nothing of one's own


@case("images_create")
def _(p: Probe) -> None:
    p.call(201, body={"name": "torch", "reference": "docker.io/pytorch/pytorch:2.3.1"})
    p.call(409, body={"name": "torch", "reference": "docker.io/pytorch/pytorch:2.3.1"})
    p.call(400, body={"name": "bad", "reference": "evil.example.com/miner:1"})


@case("images_retrieve")
def _(p: Probe) -> None:
    image = make_image(p.user)
    p.call(200, params={"id": image.id})
    p.call(404, params={"id": image.id}, client=p.stranger())


@case("images_destroy")
def _(p: Probe) -> None:
    from instances.lifecycle import instance_order

    _catalog()
    used = make_image(p.user, "used")
    fund(p.user, 100_000)
    offering = Offering.objects.get(name="1× H100 80GB SXM")
    instance_order(user=p.user, offering_id=offering.id, image_id=used.id)
    p.call(409, params={"id": used.id})
    p.call(404, params={"id": used.id}, client=p.stranger())
    p.call(204, params={"id": make_image(p.user).id})


@case("regions_list", who="anon")
def _(p: Probe) -> None:
    _catalog()
    p.call(200)


def _dataset() -> Any:
    entry, _created = public_dataset_upsert(
        dataset_id="imagenet-1k",
        values={
            "kind": "dataset",
            "name": "ImageNet-1k",
            "version": "2012",
            "size_bytes": 146_900_000_000,
            "licence": "custom",
            "directory": "imagenet-1k",
            "description": "ILSVRC 2012.",
            "homepage": "https://example.org/imagenet",
            "tags": "vision, classification",
        },
    )
    return entry


@case("datasets_list", who="anon")
def _(p: Probe) -> None:
    _dataset()
    p.call(200)
    p.call(400, query={"kind": "video"})


@case("datasets_retrieve", who="anon")
def _(p: Probe) -> None:
    p.call(200, params={"dataset_id": _dataset().id})
    p.call(404, params={"dataset_id": "no-such-dataset"})


# instances


@case("instances_list")
def _(p: Probe) -> None:
    make_instance(p.user)
    p.call(200)
    p.call(400, query={"status": "sleeping"})


@case("instances_create")
def _(p: Probe) -> None:
    _catalog()
    order = {
        "offering": Offering.objects.get(name="1× H100 80GB SXM").id,
        "image": "pytorch-2.1",
        "name": "train",
    }
    p.call(200, body={**order, "dry_run": True})  # a dry run: the refusal, said
    p.call(402, body=order)  # the trial credit does not pay an hour
    fund(p.user, 100_000)
    _on_hold(p, body=order)
    p.call(202, body=order, headers={"Idempotency-Key": "order-1"})
    p.call(409, body={**order, "name": "other"}, headers={"Idempotency-Key": "order-1"})
    p.call(404, body={**order, "disks": ["dsk_unknown"]})
    p.call(400, body={**order, "gpus": 8})


@case("instances_retrieve")
def _(p: Probe) -> None:
    instance = make_instance(p.user)
    p.call(200, params={"id": instance.id})
    p.call(404, params={"id": instance.id}, client=p.stranger())


@case("instances_destroy")
def _(p: Probe) -> None:
    instance = make_instance(p.user)
    p.call(400, params={"id": instance.id}, query={"keep_disk": "perhaps"})
    p.call(202, params={"id": instance.id}, query={"keep_disk": "true"})
    p.call(404, params={"id": instance.id}, client=p.stranger())
    rank = make_cluster(p.user).ranks.get(index=0).instance
    p.call(409, params={"id": rank.id})  # a cluster's rank: the cluster terminates as a whole


@case("instances_stop")
def _(p: Probe) -> None:
    p.cluster()
    instance = make_instance(p.user, status="running")
    p.call(202, params={"id": instance.id})
    p.call(409, params={"id": instance.id})
    p.call(404, params={"id": instance.id}, client=p.stranger())


@case("instances_clone")
def _(p: Probe) -> None:
    p.cluster()
    source = make_instance(p.user, status="stopped")
    p.call(200, params={"id": source.id}, body={"dry_run": True})
    p.call(400, params={"id": source.id}, body={"region": "elsewhere"})
    p.call(402, params={"id": source.id})
    fund(p.user, 100_000)
    p.call(202, params={"id": source.id})
    p.call(409, params={"id": make_instance(p.user).id})  # provisioning: not yet cloneable
    p.call(404, params={"id": source.id}, client=p.stranger())


@case("instances_image_save")
def _(p: Probe) -> None:
    p.cluster()
    instance = make_instance(p.user, status="stopped")
    assert p.call(202, params={"id": instance.id}, body={"name": "env"}).json()["name"] == "env"
    p.call(409, params={"id": instance.id}, body={"name": "env"})  # the name is taken
    p.call(400, params={"id": instance.id}, body={})
    p.call(404, params={"id": instance.id}, body={"name": "x"}, client=p.stranger())


@case("instances_start")
def _(p: Probe) -> None:
    p.cluster()
    instance = make_instance(p.user, status="stopped")
    p.call(200, params={"id": instance.id}, body={"dry_run": True})
    p.call(402, params={"id": instance.id})
    fund(p.user, 100_000)
    p.call(400, params={"id": instance.id}, body={"gpus": 3})  # neither 0 nor its 1
    p.call(202, params={"id": instance.id}, body={"gpus": 0})  # no-GPU mode
    p.call(409, params={"id": instance.id})
    p.call(404, params={"id": instance.id}, client=p.stranger())


@case("instances_events_list")
def _(p: Probe) -> None:
    p.cluster()
    instance = make_instance(p.user, status="running")
    instance_stop(instance_id=instance.id)
    p.call(200, params={"id": instance.id})
    p.call(404, params={"id": instance.id}, client=p.stranger())


@case("instances_metrics_retrieve")
def _(p: Probe) -> None:
    node = _node()
    instance = _placed(p.user, node)
    # Samples from after the GPUs became the instance's (earlier ones are not its own).
    report = _agent_report(node.name, "h100_8x_healthy.json")  # Xid 79 would cordon
    report_ingest(node=node, report=report_parse(report, node_name=node.name))
    body = p.call(200, params={"id": instance.id}).json()
    assert body["results"][0]["samples"], "no samples: the check above validated too little"
    p.call(404, params={"id": instance.id}, client=p.stranger())


@case("instances_disks_attach")
def _(p: Probe) -> None:
    instance, disk, other = make_instance(p.user), make_disk(p.user), make_disk(p.user, "data")
    p.call(202, params={"id": instance.id}, body={"disk": disk.id})
    p.call(404, params={"id": instance.id}, body={"disk": "dsk_unknown"})
    p.call(400, params={"id": instance.id}, body={"disk": other.id, "mount": "/data"})
    Instance.objects.filter(pk=instance.pk).update(status="running")
    p.call(409, params={"id": instance.id}, body={"disk": other.id})  # restart not confirmed


@case("instances_disks_detach")
def _(p: Probe) -> None:
    instance, disk, loose = make_instance(p.user), make_disk(p.user), make_disk(p.user, "loose")
    disk_attach(instance=instance, disk_id=disk.id)
    ids = {"id": instance.id, "disk": disk.id}
    p.call(404, params={**ids, "disk": loose.id})
    p.call(400, params=ids, query={"restart": "perhaps"})
    Instance.objects.filter(pk=instance.pk).update(status="running")
    p.call(409, params=ids)  # restart not confirmed
    Instance.objects.filter(pk=instance.pk).update(status="stopped")
    p.call(202, params=ids)


@case("instances_ports_update")
def _(p: Probe) -> None:
    instance = make_instance(p.user)
    ports = p.call(200, params={"id": instance.id}, body={"ports": [6006, 7860]}).json()
    assert [row["port"] for row in ports["ports"]] == [6006, 7860]
    assert p.call(400, params={"id": instance.id}, body={"ports": [22]}).json()["code"] == (
        "reserved_port"
    )
    p.call(404, params={"id": instance.id}, body={"ports": []}, client=p.stranger())
    instance_terminate(instance_id=instance.id)
    p.call(409, params={"id": instance.id}, body={"ports": [6006]})


@case("instances_shares_list")
def _(p: Probe) -> None:
    instance = make_instance(p.user)
    share_create(instance=instance, port=8888, user=p.user)
    assert len(p.call(200, params={"id": instance.id}).json()["results"]) == 1
    p.call(404, params={"id": instance.id}, client=p.stranger())


@case("instances_shares_create")
def _(p: Probe) -> None:
    instance = make_instance(p.user)
    made = p.call(201, params={"id": instance.id}, body={"port": 8888}).json()
    assert "/__starverse/share?token=" in made["url"]
    p.call(400, params={"id": instance.id}, body={"port": 6006})  # not served
    p.call(404, params={"id": instance.id}, body={"port": 8888}, client=p.stranger())
    instance_terminate(instance_id=instance.id)
    p.call(409, params={"id": instance.id}, body={"port": 8888})


@case("instances_shares_destroy")
def _(p: Probe) -> None:
    instance = make_instance(p.user)
    share, _url = share_create(instance=instance, port=8888, user=p.user)
    ids = {"id": instance.id, "share": share.id}
    p.call(404, params=ids, client=p.stranger())
    p.call(204, params=ids)
    assert p.call(404, params=ids).json()["code"] == "share_not_found"


@case("instances_partial_update")
def _(p: Probe) -> None:
    instance = make_instance(p.user)
    changed = p.call(
        200, params={"id": instance.id}, body={"idle_stop": {"util_pct": 10, "minutes": 60}}
    ).json()
    assert changed["idle_stop"] == {"util_pct": 10, "minutes": 60}
    p.call(200, params={"id": instance.id}, body={"idle_stop": None, "stop_after_hours": 2})
    p.call(400, params={"id": instance.id}, body={"idle_stop": {"util_pct": 0, "minutes": 60}})
    p.call(404, params={"id": instance.id}, body={"stop_at": None}, client=p.stranger())
    instance_terminate(instance_id=instance.id)
    p.call(409, params={"id": instance.id}, body={"stop_at": None})


@case("instances_keep_running")
def _(p: Probe) -> None:
    p.cluster()
    instance = make_instance(p.user, status="running")  # the account's idle stop: on
    assert p.call(200, params={"id": instance.id}).json()["idle_stop_due_at"] is None
    p.call(404, params={"id": instance.id}, client=p.stranger())
    instance_stop(instance_id=instance.id)
    p.call(409, params={"id": instance.id})


@case("instances_auto_stop_savings")
def _(p: Probe) -> None:
    assert p.call(200).json()["saved_fen"] == 0


# storage


@case("disks_list")
def _(p: Probe) -> None:
    make_disk(p.user)
    p.call(200)


@case("disks_create")
def _(p: Probe) -> None:
    _catalog()  # storage prices: a disk costs 1 fen per GB and day
    fund(p.user, 1_000)  # storage is paid from cash, never trial credit
    _on_hold(p, body={"name": "ckpt", "size_gb": 100})
    p.call(201, body={"name": "ckpt", "size_gb": 100})
    p.call(409, body={"name": "ckpt", "size_gb": 100})
    p.call(402, body={"name": "huge", "size_gb": 5_000})
    p.call(400, body={"name": "tiny", "size_gb": 0})


@case("disks_retrieve")
def _(p: Probe) -> None:
    disk = make_disk(p.user)
    p.call(200, params={"id": disk.id})
    p.call(404, params={"id": disk.id}, client=p.stranger())


@case("disks_partial_update")
def _(p: Probe) -> None:
    disk = make_disk(p.user, size_gb=100)
    fund(p.user, 1_000)  # growing is paid from cash
    p.call(200, params={"id": disk.id}, body={"size_gb": 150})
    p.call(400, params={"id": disk.id}, body={"size_gb": 10})
    p.call(404, params={"id": disk.id}, body={"size_gb": 200}, client=p.stranger())
    Disk.objects.filter(pk=disk.pk).update(status="deleting")
    p.call(409, params={"id": disk.id}, body={"size_gb": 200})
    _catalog()
    paid = disk_create(user=p.user, name="paid", size_gb=1)  # today is charged: growth is too
    StoragePrice.objects.filter(kind="disk").update(price_per_gb_day_fen=10**6)
    p.call(402, params={"id": paid.id}, body={"size_gb": 16_000})


@case("disks_destroy")
def _(p: Probe) -> None:
    disk = make_disk(p.user)
    disk_attach(instance=make_instance(p.user), disk_id=disk.id)
    p.call(409, params={"id": disk.id})
    p.call(202, params={"id": make_disk(p.user, "free").id})
    p.call(404, params={"id": disk.id}, client=p.stranger())


@case("nas_retrieve")
def _(p: Probe) -> None:
    p.call(404)
    nas_set_size(user=p.user, size_gb=10)
    p.call(200)


@case("nas_update")
def _(p: Probe) -> None:
    _catalog()  # storage prices: the NAS costs 2 fen per GB and day
    fund(p.user, 1_000)  # storage is paid from cash, never trial credit
    p.call(402, body={"size_gb": 1_000})
    p.call(201, body={"size_gb": 100})
    p.call(200, body={"size_gb": 200})
    p.call(400, body={"size_gb": 50})
    nas_delete(tenant_id=p.user.tenant_id)
    p.call(409, body={"size_gb": 100})  # the old one is still being deleted


@case("nas_destroy")
def _(p: Probe) -> None:
    p.call(404)
    nas_set_size(user=p.user, size_gb=10)
    instance = _placed(p.user, _node())
    p.call(409)
    instance_terminate(instance_id=instance.id)
    converge.terminate(instance.id)  # it never reached the cluster: its GPUs are given back
    p.call(202)


# clusters


def _running_cluster(p: Probe) -> Any:
    """A 2-node cluster whose ranks are up and passed the pre-flight check: running."""
    p.cluster()
    cluster = make_cluster(p.user)
    for rank in Instance.objects.filter(cluster_rank__cluster=cluster).all():
        assert converge_until(converge.provision, rank.id) == "checking"
    assert preflight_run(cluster.id) == "passed"
    return cluster


@case("clusters_list")
def _(p: Probe) -> None:
    make_cluster(p.user)
    p.call(200)


@case("clusters_plan", who="anon")
def _(p: Probe) -> None:
    _catalog()
    p.call(200, body={"preset": "llama-7b", "gpu_model": "h100-80g", "node_count": 1})
    p.call(400, body={"preset": "llama-7b", "gpu_model": "h100-80g", "node_count": 0})


@case("clusters_create")
def _(p: Probe) -> None:
    _catalog()
    order = {
        "offering": Offering.objects.get(name="8× H100 80GB SXM bare metal").id,
        "image": "pytorch-2.1",
        "node_count": 2,
        "template": "deepspeed",
    }
    p.call(200, body={**order, "dry_run": True})  # a dry run: the refusal, said
    p.call(402, body=order)  # the trial credit does not pay an hour of two nodes
    fund(p.user, 1_000_000)
    _on_hold(p, body=order)
    p.call(202, body=order, headers={"Idempotency-Key": "cluster-1"})
    p.call(409, body={**order, "template": "none"}, headers={"Idempotency-Key": "cluster-1"})
    p.call(400, body={**order, "node_count": 1})


@case("clusters_retrieve")
def _(p: Probe) -> None:
    cluster = make_cluster(p.user)
    p.call(200, params={"id": cluster.id})
    p.call(404, params={"id": cluster.id}, client=p.stranger())


@case("clusters_destroy")
def _(p: Probe) -> None:
    cluster = make_cluster(p.user)
    p.call(202, params={"id": cluster.id})
    p.call(404, params={"id": cluster.id}, client=p.stranger())


@case("clusters_stop")
def _(p: Probe) -> None:
    cluster = _running_cluster(p)
    p.call(202, params={"id": cluster.id})
    p.call(409, params={"id": cluster.id})
    p.call(404, params={"id": cluster.id}, client=p.stranger())


@case("clusters_start")
def _(p: Probe) -> None:
    cluster = _running_cluster(p)
    cluster_stop(cluster=cluster)
    for rank in Instance.objects.filter(cluster_rank__cluster=cluster).all():
        assert converge_until(converge.stop, rank.id) == "stopped"
    # its first minutes went on trial credit at the trial price: a fen of cash spent leaves the
    # cash short of an hour of both nodes
    ledger_post(
        wallet_id=p.user.tenant.wallet.id,
        key="usage:walk:1",
        kind=TransactionKind.USAGE,
        amount_fen=-1,
        description="GPU usage",
    )
    p.call(200, params={"id": cluster.id}, body={"dry_run": True})
    p.call(402, params={"id": cluster.id})  # an hour is not covered
    fund(p.user, 1_000_000)
    p.call(202, params={"id": cluster.id})
    p.call(409, params={"id": cluster.id})
    p.call(404, params={"id": cluster.id}, client=p.stranger())


@case("clusters_scale")
def _(p: Probe) -> None:
    cluster = _running_cluster(p)
    p.call(409, params={"id": cluster.id}, body={"node_count": 3})  # running
    cluster_stop(cluster=cluster)
    for rank in Instance.objects.filter(cluster_rank__cluster=cluster).all():
        assert converge_until(converge.stop, rank.id) == "stopped"
    p.call(400, params={"id": cluster.id}, body={"node_count": 1})
    p.call(202, params={"id": cluster.id}, body={"node_count": 2})  # unchanged: message null
    p.call(404, params={"id": cluster.id}, body={"node_count": 2}, client=p.stranger())


@case("clusters_events_list")
def _(p: Probe) -> None:
    cluster = make_cluster(p.user)
    body = p.call(200, params={"id": cluster.id}).json()
    assert body["results"], "no events: the check above validated too little"
    p.call(404, params={"id": cluster.id}, client=p.stranger())


@case("clusters_metrics_retrieve")
def _(p: Probe) -> None:
    cluster = make_cluster(p.user)
    p.call(200, params={"id": cluster.id})
    p.call(404, params={"id": cluster.id}, client=p.stranger())


# jobs


def _job(p: Probe, command: str = "true") -> Job:
    """A one-GPU job of the probe's user, submitted (its rank placed; its task not run)."""
    p.cluster()
    fund(p.user, 1_000_000)
    job, _created = job_submit(
        user=p.user,
        request=JobRequest(
            offering_id=Offering.objects.get(name="1× H100 80GB SXM").id,
            image_id="pytorch-2.1",
            command=command,
            nas=False,
        ),
    )
    return job


@case("jobs_list")
def _(p: Probe) -> None:
    _job(p)
    p.call(200)


@case("jobs_create")
def _(p: Probe) -> None:
    p.cluster()
    order = {
        "offering": Offering.objects.get(name="8× H100 80GB SXM").id,
        "image": "pytorch-2.1",
        "command": "python train.py",
        "nas": False,
    }
    p.call(200, body={**order, "dry_run": True})  # a dry run: the refusal, said
    p.call(402, body=order)  # the trial credit does not pay an hour of eight H100s
    fund(p.user, 1_000_000)
    _on_hold(p, body=order)
    p.call(202, body=order, headers={"Idempotency-Key": "job-1"})
    p.call(409, body={**order, "command": "false"}, headers={"Idempotency-Key": "job-1"})
    p.call(400, body={**order, "node_count": 2})


@case("jobs_retrieve")
def _(p: Probe) -> None:
    job = _job(p)
    p.call(200, params={"id": job.id})
    p.call(404, params={"id": job.id}, client=p.stranger())


@case("jobs_destroy")
def _(p: Probe) -> None:
    job = _job(p)
    p.call(404, params={"id": job.id}, client=p.stranger())
    p.call(202, params={"id": job.id})
    Job.objects.filter(pk=job.pk).update(status="cancelled")  # its rank's end, as job_sync sees it
    p.call(409, params={"id": job.id})


@case("jobs_events_list")
def _(p: Probe) -> None:
    job = _job(p)
    p.call(200, params={"id": job.id})
    p.call(404, params={"id": job.id}, client=p.stranger())


@case("jobs_logs_retrieve")
def _(p: Probe) -> None:
    job = _job(p)
    p.call(200, params={"id": job.id})
    p.call(400, params={"id": job.id}, query={"tail": "-1"})
    p.call(404, params={"id": job.id}, query={"rank": "3"})
    p.call(404, params={"id": job.id}, client=p.stranger())


# endpoints


def _serve_body() -> dict[str, Any]:
    _catalog()
    make_public_model()
    return {
        "name": "qwen",
        "source": {"dataset": "qwen2-7b-instruct"},
        "engine": "vllm",
        "offering": Offering.objects.get(name="1× H100 80GB SXM").id,
        "min_replicas": 1,
        "max_replicas": 2,
    }


@case("endpoints_list")
def _(p: Probe) -> None:
    make_endpoint(p.user)
    p.call(200)


@case("endpoints_create")
def _(p: Probe) -> None:
    body = _serve_body()
    p.call(200, body={**body, "dry_run": True})  # a dry run: the quote
    p.call(402, body={**body, "min_replicas": 2})  # the trial credit does not pay two hours
    fund(p.user, 1_000_000)
    _on_hold(p, body=body)
    p.call(202, body=body, headers={"Idempotency-Key": "serve-1"})
    p.call(409, body={**body, "name": "other"}, headers={"Idempotency-Key": "serve-1"})
    p.call(400, body={**body, "engine_options": {"nope": 1}})


@case("endpoints_retrieve")
def _(p: Probe) -> None:
    endpoint = make_endpoint(p.user)
    p.call(200, params={"id": endpoint.id})
    p.call(404, params={"id": endpoint.id}, client=p.stranger())


@case("endpoints_partial_update")
def _(p: Probe) -> None:
    endpoint = make_endpoint(p.user)
    p.call(200, params={"id": endpoint.id}, body={"max_replicas": 3, "dry_run": True})
    p.call(202, params={"id": endpoint.id}, body={"max_replicas": 3})
    p.call(400, params={"id": endpoint.id}, body={"engine_options": {"nope": 1}})
    p.call(404, params={"id": endpoint.id}, body={}, client=p.stranger())
    endpoint_suspend(endpoint_id=endpoint.id)
    wallet = p.user.tenant.wallet
    wallet.refresh_from_db()
    ledger_post(
        wallet_id=wallet.id,
        key="schema-walk:drain",
        kind=TransactionKind.USAGE,
        amount_fen=-wallet.cash_fen,  # usage takes cash only; replicas are paid from cash
        description="GPU usage",
    )
    p.call(402, params={"id": endpoint.id}, body={"min_replicas": 1})  # no hour to resume
    endpoint_delete(endpoint=endpoint)
    p.call(409, params={"id": endpoint.id}, body={"max_replicas": 1})


@case("endpoints_destroy")
def _(p: Probe) -> None:
    endpoint = make_endpoint(p.user)
    p.call(404, params={"id": endpoint.id}, client=p.stranger())
    p.call(202, params={"id": endpoint.id})


@case("endpoints_keys_list")
def _(p: Probe) -> None:
    endpoint = make_endpoint(p.user)
    key_create(endpoint=endpoint, name="k", user=p.user)
    body = p.call(200, params={"id": endpoint.id}).json()
    assert body["results"], "no keys: the check above validated too little"
    p.call(404, params={"id": endpoint.id}, client=p.stranger())


@case("endpoints_keys_create")
def _(p: Probe) -> None:
    endpoint = make_endpoint(p.user)
    p.call(201, params={"id": endpoint.id}, body={"name": "prod"})
    p.call(400, params={"id": endpoint.id}, body={"name": 5})
    p.call(404, params={"id": endpoint.id}, body={}, client=p.stranger())
    endpoint_delete(endpoint=endpoint)
    p.call(409, params={"id": endpoint.id}, body={})


@case("endpoints_keys_destroy")
def _(p: Probe) -> None:
    endpoint = make_endpoint(p.user)
    key, _secret = key_create(endpoint=endpoint, name="k", user=p.user)
    p.call(404, params={"id": endpoint.id, "key_id": key.id}, client=p.stranger())
    p.call(204, params={"id": endpoint.id, "key_id": key.id})
    p.call(404, params={"id": endpoint.id, "key_id": key.id})


@case("endpoints_metrics_retrieve")
def _(p: Probe) -> None:
    endpoint = make_endpoint(p.user)
    p.call(200, params={"id": endpoint.id})
    p.call(404, params={"id": endpoint.id}, client=p.stranger())


# fleet


@case("nodes_list", who="staff")
def _(p: Probe) -> None:
    _reporting_node()
    body = p.call(200).json()
    assert body["results"][0]["gpus"], "no GPUs: the check above validated too little"
    p.call(403, client=p.client)


@case("nodes_capacity_retrieve", who="staff")
def _(p: Probe) -> None:
    _reporting_node()
    p.call(200)
    p.call(403, client=p.client)


@case("nodes_register", who="anon")
def _(p: Probe) -> None:
    p.settings.NODE_BOOTSTRAP_TOKEN = "boot-schema-walk"
    body = {
        "name": "gpu-new-01",
        "bootstrap_token": "boot-schema-walk",
        "gpu_product": "NVIDIA H100 80GB HBM3",
        "gpu_count": 8,
        "gpu_memory_mb": 81559,
    }
    p.call(201, body=body)
    p.call(409, body=body)
    p.call(401, body={**body, "name": "gpu-new-02", "bootstrap_token": "a guess"})
    p.call(400, body={**body, "name": "gpu-new-03", "region": "mars-1"})
    p.call(400, body={**body, "gpu_count": 0})


@case("nodes_report", who="node")
def _(p: Probe) -> None:
    node = _node()
    auth = {"Authorization": f"Bearer {node_token_issue(node=node)}"}
    report = _agent_report(node.name)
    assert report["events"], "no events: the check below validated too little"
    p.call(202, params={"name": node.name}, body=report, headers=auth)
    p.call(401, params={"name": node.name}, body=report, headers={"Authorization": "Bearer x"})
    p.call(400, params={"name": node.name}, raw="{not json", headers=auth)
    too_large = json.dumps({**report, "padding": "x" * MAX_REPORT_BYTES})
    assert (
        p.call(400, params={"name": node.name}, raw=too_large, headers=auth).json()["code"]
        == "too_large"
    )


# events: webhooks and notification channels


def _webhook(p: Probe) -> Any:
    return make_webhook(p.user)


def _public_hook() -> dict[str, Any]:
    # a public address (not contacted: the walk runs no worker after commit)
    return {"url": "https://203.0.113.9/hook", "events": ["job.failed"]}


@case("webhooks_list")
def _(p: Probe) -> None:
    _webhook(p)
    assert p.call(200).json()["count"] == 1


@case("webhooks_create")
def _(p: Probe) -> None:
    p.settings.WEBHOOK_ALLOWED_CIDRS = ["203.0.113.0/24"]
    assert p.call(201, body=_public_hook()).json()["secret"].startswith("whsec_")
    p.call(400, body={**_public_hook(), "events": ["no.such"]})
    p.call(400, body={**_public_hook(), "url": "http://127.0.0.1/"})


@case("webhooks_retrieve")
def _(p: Probe) -> None:
    hook = _webhook(p)
    p.call(200, params={"id": hook.id})
    p.call(404, params={"id": hook.id}, client=p.stranger())


@case("webhooks_partial_update")
def _(p: Probe) -> None:
    hook = _webhook(p)
    p.call(200, params={"id": hook.id}, body={"description": "CI", "enabled": False})
    p.call(400, params={"id": hook.id}, body={"events": []})
    p.call(404, params={"id": hook.id}, body={"description": "x"}, client=p.stranger())


@case("webhooks_destroy")
def _(p: Probe) -> None:
    hook = _webhook(p)
    p.call(404, params={"id": hook.id}, client=p.stranger())
    p.call(204, params={"id": hook.id})


@case("webhooks_deliveries_list")
def _(p: Probe) -> None:
    hook = _webhook(p)
    webhook_test(user=p.user, webhook=hook)
    assert p.call(200, params={"id": hook.id}).json()["count"] == 1
    p.call(404, params={"id": hook.id}, client=p.stranger())


@case("webhooks_deliveries_redeliver")
def _(p: Probe) -> None:
    hook = _webhook(p)
    delivery = webhook_test(user=p.user, webhook=hook)
    params = {"id": hook.id, "delivery_id": delivery.id}
    p.call(202, params=params)
    p.call(404, params={"id": hook.id, "delivery_id": "whd_unknown"})


@case("webhooks_rotate_secret")
def _(p: Probe) -> None:
    hook = _webhook(p)
    assert p.call(200, params={"id": hook.id}).json()["secret"] != hook.secret
    p.call(404, params={"id": hook.id}, client=p.stranger())


@case("webhooks_test")
def _(p: Probe) -> None:
    hook = _webhook(p)
    assert p.call(202, params={"id": hook.id}).json()["type"] == "webhook.test"
    p.call(404, params={"id": hook.id}, client=p.stranger())


@case("notification_channels_list")
def _(p: Probe) -> None:
    made = make_channel(p.user)
    listed = [row["id"] for row in p.call(200).json()["results"]]
    assert len(listed) == 2 and made.id in listed  # and the account's default e-mail channel


@case("notification_channels_create")
def _(p: Probe) -> None:
    assert p.call(201, body={"kind": "email"}).json()["target"] == p.user.email
    p.call(400, body={"kind": "wecom", "target": "http://10.0.0.1/x"})


@case("notification_channels_retrieve")
def _(p: Probe) -> None:
    channel = make_channel(p.user)
    p.call(200, params={"id": channel.id})
    p.call(404, params={"id": channel.id}, client=p.stranger())


@case("notification_channels_partial_update")
def _(p: Probe) -> None:
    channel = make_channel(p.user)
    p.call(200, params={"id": channel.id}, body={"enabled": False, "language": "en"})
    p.call(400, params={"id": channel.id}, body={"events": ["no.such"]})
    p.call(404, params={"id": channel.id}, body={"enabled": True}, client=p.stranger())


@case("notification_channels_destroy")
def _(p: Probe) -> None:
    channel = make_channel(p.user)
    p.call(404, params={"id": channel.id}, client=p.stranger())
    p.call(204, params={"id": channel.id})


@case("notification_channels_test")
def _(p: Probe) -> None:
    channel = make_channel(p.user)
    p.call(202, params={"id": channel.id})
    p.call(404, params={"id": channel.id}, client=p.stranger())
