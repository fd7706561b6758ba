"""Editable caps (PATCH /api/v1/tokens/{id}): a token's owner lowers or raises its caps and
expiry through a console session or an uncapped token, audited with both values; a capped
token can only tighten caps, so it cannot raise (nor lift) its own; anyone else's token is a
404."""

from datetime import timedelta
from typing import Any

from django.utils import timezone
from rest_framework.test import APIClient

from starverse.accounts.models import ApiToken, AuditEvent
from tests.accounts.test_token_caps import HOUR, _capped, _order, payer  # noqa: F401
from tests.factories import PASSWORD, make_user


def _session(user: Any) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def _caps(token: ApiToken) -> tuple[Any, Any, Any]:
    token.refresh_from_db()
    return token.max_spend_fen, token.max_spend_per_day_fen, token.expires_at


def test_the_owner_raises_a_cap_in_the_console_and_the_next_order_passes(payer):  # noqa: F811
    token, agent = _capped(payer, max_spend_fen=HOUR + 100)
    assert _order(agent).status_code == 202
    assert _order(agent).status_code == 402

    raised = _session(payer).patch(
        f"/api/v1/tokens/{token.id}", {"max_spend_fen": 3 * HOUR}, format="json"
    )

    assert raised.status_code == 200
    assert raised.json()["max_spend_fen"] == 3 * HOUR
    assert _caps(token) == (3 * HOUR, None, None)
    assert _order(agent).status_code == 202
    audit = AuditEvent.objects.get(action="token.caps_changed")
    assert (audit.tenant_id, audit.actor_id, audit.object_id) == (
        payer.tenant_id,
        payer.pk,
        token.id,
    )
    assert audit.data == {
        "name": "agent",
        "before": {"max_spend_fen": HOUR + 100},
        "after": {"max_spend_fen": 3 * HOUR},
    }


def test_a_capped_token_cannot_raise_its_own_cap_but_can_tighten_it(payer):  # noqa: F811
    soon = timezone.now() + timedelta(days=1)
    token, agent = _capped(payer, max_spend_fen=HOUR, expires_at=soon)
    url = f"/api/v1/tokens/{token.id}"

    for change in (
        {"max_spend_fen": HOUR + 1},
        {"max_spend_fen": None},
        {"expires_at": (soon + timedelta(hours=1)).isoformat()},
        {"max_spend_fen": 10, "expires_at": None},  # one tighter, one lifted: nothing changes
    ):
        refused = agent.patch(url, change, format="json")
        assert (refused.status_code, refused.json().get("code")) == (403, "token_cap"), (
            change,
            refused.json(),
        )
    assert _caps(token) == (HOUR, None, soon)
    assert not AuditEvent.objects.filter(action="token.caps_changed").exists()

    lowered = agent.patch(url, {"max_spend_fen": 100, "max_spend_per_day_fen": 50}, format="json")

    assert lowered.status_code == 200
    assert _caps(token) == (100, 50, soon)


def test_a_capped_token_cannot_raise_another_tokens_cap_past_its_own(payer):  # noqa: F811
    other, _client = _capped(payer, max_spend_fen=HOUR)
    _token, agent = _capped(payer, max_spend_fen=2 * HOUR)

    refused = agent.patch(f"/api/v1/tokens/{other.id}", {"max_spend_fen": 3 * HOUR}, format="json")

    assert (refused.status_code, refused.json()["code"]) == (403, "token_cap")
    assert _caps(other) == (HOUR, None, None)


def test_an_uncapped_token_lifts_a_cap(payer):  # noqa: F811
    token, _agent = _capped(payer, max_spend_fen=HOUR, max_spend_per_day_fen=HOUR)
    _admin, uncapped = _capped(payer)

    lifted = uncapped.patch(
        f"/api/v1/tokens/{token.id}", {"max_spend_per_day_fen": None}, format="json"
    )

    assert lifted.status_code == 200
    assert _caps(token) == (HOUR, None, None)


def test_an_expiry_in_the_past_is_refused(payer):  # noqa: F811
    token, _agent = _capped(payer, max_spend_fen=HOUR)
    past = (timezone.now() - timedelta(minutes=1)).isoformat()

    refused = _session(payer).patch(
        f"/api/v1/tokens/{token.id}", {"expires_at": past}, format="json"
    )

    assert refused.status_code == 400
    assert _caps(token) == (HOUR, None, None)


def test_another_persons_token_is_a_404(payer):  # noqa: F811
    token, _agent = _capped(payer, max_spend_fen=HOUR)

    answer = _session(make_user()).patch(
        f"/api/v1/tokens/{token.id}", {"max_spend_fen": 9 * HOUR}, format="json"
    )

    assert answer.status_code == 404
    assert _caps(token) == (HOUR, None, None)


def test_the_tokens_page_changes_a_tokens_caps(payer, client):  # noqa: F811
    token, _agent = _capped(payer, max_spend_fen=20_000, max_spend_per_day_fen=5_000)
    assert client.login(username=payer.email, password=PASSWORD)
    page = client.get("/accounts/tokens/").content.decode()
    assert f'action="/accounts/tokens/{token.id}/caps/"' in page
    assert 'name="max_spend" autocomplete="off" value="200.00"' in page

    saved = client.post(
        f"/accounts/tokens/{token.id}/caps/",
        {"max_spend": "1,000", "max_spend_per_day": "", "expires_at": ""},
    )

    assert (saved.status_code, saved["Location"]) == (302, "/accounts/tokens/")
    assert _caps(token) == (100_000, None, None)
    assert AuditEvent.objects.filter(action="token.caps_changed", object_id=token.id).count() == 1
    bad = client.post(f"/accounts/tokens/{token.id}/caps/", {"max_spend": "-5"})
    assert bad.status_code == 302 and _caps(token) == (100_000, None, None)
