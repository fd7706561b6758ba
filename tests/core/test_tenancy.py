"""Generated from the URL configuration: every API route that addresses one object must be a
TenantScopedViewSet, and for each, user B gets 404 on user A's object with every method and
never sees it in the list. A new endpoint is covered as soon as it is routed."""

import re

import pytest
from django.apps import apps
from django.urls import URLPattern, URLResolver, get_resolver

from starverse.core.api.views import TenantScopedViewSet
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

    for method, action in list(callback.actions.items()):
        response = client.generic(method.upper(), path, "{}", content_type="application/json")
        assert response.status_code == 404, (method, path, action, response.content)
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
