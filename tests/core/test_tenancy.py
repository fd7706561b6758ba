"""Generated from the URL configuration: every API route that addresses one object must be a
TenantScopedViewSet, and for each, user B gets 404 on user A's object with every method and
never sees it in the list. A new endpoint is covered as soon as it is routed."""

import re

import pytest
from django.apps import apps
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from billing.choices import TransactionKind
from billing.models import Wallet
from billing.onboarding import team_create
from billing.services import ledger_post
from starverse.accounts.services import token_create
from starverse.accounts.teams import (
    invitation_accept,
    invitation_create,
    invitation_token,
)
from starverse.core.api.views import TenantScopedViewSet
from teams.services import membership_remove
from tests.factories import OWNED_OBJECT_FACTORIES, make_user


def _api_routes():
    routes = []

    def walk(patterns, prefix):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                routes.append((prefix + str(pattern.pattern), pattern.callback))

    walk(get_resolver().url_patterns, "")
    return [(route, callback) for route, callback in routes if route.startswith("api/v1/")]


OBJECT_ROUTES = [(r, cb) for r, cb in _api_routes() if "<pk>" in r or "(?P<pk>" in r]


def test_every_object_route_is_tenant_scoped():
    assert OBJECT_ROUTES, "no object routes found: the URL walk is broken"
    for route, callback in OBJECT_ROUTES:
        view_class = getattr(callback, "cls", None)
        assert view_class is not None and issubclass(view_class, TenantScopedViewSet), route


def _concrete_path(route: str, pk: str) -> str:
    path = route.replace("^", "").replace("$", "")
    path = re.sub(r"\(\?P<pk>[^)]*\)", pk, path)
    path = re.sub(r"\(\?P<\w+>[^)]*\)", "dsk_unknown", path)  # a second id (a disk)
    return "/" + path.replace("<pk>", pk)


@pytest.mark.parametrize(("route", "callback"), OBJECT_ROUTES, ids=[r for r, _ in OBJECT_ROUTES])
def test_another_tenants_object_is_404_everywhere(route, callback, client_for, db, payments):
    model = callback.cls.model
    factory = OWNED_OBJECT_FACTORIES[model._meta.label]
    owner, stranger = make_user(), make_user()
    obj = factory(owner)
    before = model.objects.filter(pk=obj.pk).values().get()
    client = client_for(stranger)
    path = _concrete_path(route, obj.pk)

    for method in _methods(callback):
        response = client.generic(method.upper(), path, "{}", content_type="application/json")
        assert response.status_code == 404, (method, path, response.content)
        if method != "head":  # HEAD answers have no body
            assert response.json()["code"] == "not_found"

    assert model.objects.filter(pk=obj.pk).values().get() == before
    list_path = path.rsplit("/", 1)[0]
    listing = client.get(list_path)
    if listing.status_code == 200:
        assert obj.pk not in listing.content.decode()
    # the route works for its owner (so the 404s above are about tenancy, not a broken route)
    method = "get" if "get" in callback.actions else next(iter(callback.actions))
    own = client_for(owner).generic(method.upper(), path, "{}", content_type="application/json")
    # (a 404 about the route's second id, such as an unknown disk, is not about tenancy)
    assert own.status_code != 404 or own.json()["code"] != "not_found", (method, path, own.content)


def test_every_owned_model_has_a_factory():
    scoped_models = {cb.cls.model._meta.label for _, cb in OBJECT_ROUTES}
    assert scoped_models <= set(OWNED_OBJECT_FACTORIES), scoped_models - set(OWNED_OBJECT_FACTORIES)
    for label in OWNED_OBJECT_FACTORIES:
        apps.get_model(label)


# --- teams ----------------------------------------------------------------------------------
# The same walk inside a team: objects that someone ordered (they carry `created_by`) are the
# team's. Its members read them; a member changes only their own (403 `not_yours`), an admin
# anyone's, the billing role nothing (403 `role_forbidden`); a non-member and a removed member
# (by their own token and by a session that had switched to the team) get 404.


def _methods(callback):
    """The route's methods, HEAD included where GET is: DRF adds it to `callback.actions` (the
    same dict) on the view's first call in the process, so iterating that dict while calling
    the view would depend on the tests' order."""
    methods = list(callback.actions)
    return [*methods, "head"] if "get" in methods and "head" not in methods else methods


def _unsafe(callback):
    return [m for m in callback.actions if m not in ("get", "head", "options")]


# The team's resources (the issue: instances, clusters, disks, the NAS, endpoints); money rows
# (top-ups, invoice requests) follow the payer roles and are tested with billing.
TEAM_RESOURCES = {
    "instances.Instance",
    "clusters.Cluster",
    "jobs.Job",
    "storage.Disk",
    "endpoints.Endpoint",
    "compute.Image",
}
MONEY = {"billing.TopUp", "billing.InvoiceRequest", "billing.LedgerTransaction"}
# What only the team's owners and admins see and change (webhooks and notification channels:
# their URLs and secrets reach outside): a member and the billing role get 403 on every route.
MANAGED = {"events.Webhook", "events.NotificationChannel"}
MANAGED_ROUTES = [(r, cb) for r, cb in OBJECT_ROUTES if cb.cls.model._meta.label in MANAGED]
TEAM_ROUTES = [(r, cb) for r, cb in OBJECT_ROUTES if cb.cls.model._meta.label in TEAM_RESOURCES]


def _team_token(user, team) -> APIClient:
    _token, plaintext = token_create(user=user, name="team", team_id=team.pk)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return client


def _call(client, method, path):
    return client.generic(method.upper(), path, "{}", content_type="application/json")


def _team(owner):
    team = team_create(user=owner, name="Team walk")
    ledger_post(
        wallet_id=Wallet.objects.get(tenant=team).pk,
        key=f"topup:test:{team.pk}",
        kind=TransactionKind.TOPUP,
        amount_fen=10_000_000,
        description="Top-up",
    )
    return team


def _join(team, owner, person, role):
    invitation = invitation_create(actor=owner, team=team, email=person.email, role=role)
    invitation_accept(user=person, token=invitation_token(invitation))


def test_every_ordered_object_route_is_walked_as_a_team():
    """A new model that members order (it has `created_by`) joins TEAM_RESOURCES or MONEY."""
    ordered = {
        cb.cls.model._meta.label
        for _, cb in OBJECT_ROUTES
        if any(f.name == "created_by" for f in cb.cls.model._meta.get_fields())
    }
    assert ordered - MONEY - MANAGED == TEAM_RESOURCES, ordered - MONEY - MANAGED ^ TEAM_RESOURCES


@pytest.mark.parametrize(("route", "callback"), MANAGED_ROUTES, ids=[r for r, _ in MANAGED_ROUTES])
def test_managed_objects_are_the_team_managers_only(route, callback, client_for, db):
    model = callback.cls.model
    owner, admin, member, payer, gone = (make_user() for _ in range(5))
    team = _team(owner)
    for person, role in [(admin, "admin"), (member, "member"), (payer, "billing"), (gone, "admin")]:
        _join(team, owner, person, role)
    admin.act_for(team.pk, "admin")
    obj = OWNED_OBJECT_FACTORIES[model._meta.label](admin)
    before = model.objects.filter(pk=obj.pk).values().get()
    path = _concrete_path(route, obj.pk)
    gone_token = _team_token(gone, team)
    membership_remove(actor=owner, team=team, user_id=gone.pk)
    for method in _methods(callback):
        for client in (_team_token(member, team), _team_token(payer, team)):
            response = _call(client, method, path)
            assert response.status_code == 403, (method, path, response.content)
            if method != "head":  # HEAD answers have no body
                assert response.json()["code"] == "role_forbidden"
        for client, refused in [(client_for(gone), 404), (gone_token, 401)]:
            assert _call(client, method, path).status_code == refused, (method, path)
    assert model.objects.filter(pk=obj.pk).values().get() == before
    safe = [m for m in callback.actions if m not in _unsafe(callback) and m != "head"]
    for method in safe:
        assert _call(_team_token(owner, team), method, path).status_code == 200


@pytest.mark.parametrize(("route", "callback"), TEAM_ROUTES, ids=[r for r, _ in TEAM_ROUTES])
def test_team_members_read_change_their_own_and_outsiders_get_404(
    route, callback, client_for, db, payments
):
    model = callback.cls.model
    factory = OWNED_OBJECT_FACTORIES[model._meta.label]
    owner, orderer, other, admin, payer, outsider, gone = (make_user() for _ in range(7))
    team = _team(owner)
    for person, role in [
        (orderer, "member"),
        (other, "member"),
        (admin, "admin"),
        (payer, "billing"),
        (gone, "member"),
    ]:
        _join(team, owner, person, role)
    orderer.act_for(team.pk, "member")
    obj = factory(orderer)
    assert (obj.tenant_id, obj.created_by_id) == (team.pk, orderer.pk)
    before = model.objects.filter(pk=obj.pk).values().get()
    path = _concrete_path(route, obj.pk)
    unsafe = _unsafe(callback)
    safe = [m for m in callback.actions if m not in unsafe and m != "head"]

    gone_session = Client()
    gone_session.force_login(gone)
    assert gone_session.post("/teams/switch/", {"team": team.pk}).status_code == 302
    gone_token = _team_token(gone, team)
    if safe:  # a member's token reads it until they are removed
        assert _call(gone_token, safe[0], path).status_code == 200
    membership_remove(actor=owner, team=team, user_id=gone.pk)

    # another member of the team reads it, and may not change it
    member_api = _team_token(other, team)
    for method in safe:
        response = _call(member_api, method, path)
        assert response.status_code == 200, (method, path, response.content)
    for method in unsafe:
        response = _call(member_api, method, path)
        assert response.status_code == 403, (method, path, response.content)
        assert response.json()["code"] == "not_yours"
        response = _call(_team_token(payer, team), method, path)
        assert response.status_code == 403, (method, path, response.content)
        assert response.json()["code"] == "role_forbidden"
    # a non-member, and a removed member by their own token, their team token and their session
    for client, refused in [
        (client_for(outsider), 404),
        (client_for(gone), 404),
        (gone_token, 401),  # removing the member revoked their team tokens
        (gone_session, 404),  # the session falls back to their own account
    ]:
        for method in _methods(callback):
            response = _call(client, method, path)
            assert response.status_code == refused, (method, path, refused, response.content)
    assert model.objects.filter(pk=obj.pk).values().get() == before

    # an admin changes it (whatever the state answers, it is not about who may)
    admin_api = _team_token(admin, team)
    for method in unsafe:
        response = _call(admin_api, method, path)
        assert response.status_code not in (401, 403), (method, path, response.content)
        assert response.status_code != 404 or response.json()["code"] != "not_found"
