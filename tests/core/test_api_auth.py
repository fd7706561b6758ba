import pytest
from rest_framework.exceptions import NotAuthenticated
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory, force_authenticate

from starverse.core.api.auth import signed_in_user
from tests.factories import make_user


def test_signed_in_user_is_the_authenticated_user(db):
    user = make_user()
    raw = APIRequestFactory().get("/api/v1/me")
    force_authenticate(raw, user=user)

    assert signed_in_user(Request(raw)) == user


def test_an_anonymous_request_has_no_signed_in_user():
    request = Request(APIRequestFactory().get("/api/v1/me"))

    with pytest.raises(NotAuthenticated):
        signed_in_user(request)
