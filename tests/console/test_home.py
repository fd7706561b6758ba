"""The public home page (/): a visitor sees the live price list and the way in; a signed-in user
goes on to the dashboard."""

import re

import pytest
from django.core.management import call_command

from compute.models import Offering
from storage.models import StoragePrice
from tests.factories import make_user


@pytest.fixture
def seeded(db):
    call_command("seed_catalog", verbosity=0)


def _row(page: str, attribute: str, key: str) -> str:
    found = re.search(rf'<tr {attribute}="{re.escape(key)}">(.*?)</tr>', page, re.S)
    assert found is not None, key
    return found.group(1)


def _cell(row: str, price: str) -> str:
    found = re.search(rf'<td class="num" data-price="{price}">(.*?)</td>', row, re.S)
    assert found is not None, price
    return re.sub(r"<[^>]+>", "", found.group(1))


def test_a_visitor_sees_the_price_list(client, seeded):
    Offering.objects.filter(slug="a100-80g-x8").update(active=False)
    StoragePrice.objects.filter(kind="nas").update(price_per_gb_day_fen=3)

    response = client.get("/")

    assert response.status_code == 200
    page = response.content.decode()
    # every active offering of the catalog, in its order; an inactive one is not offered
    keys = re.findall(r'<tr data-offering="([^"]+)">', page)
    assert keys == [o.slug for o in Offering.objects.filter(active=True)]
    assert "a100-80g-x8" not in keys and len(keys) == 13
    bare = _row(page, "data-offering", "h100-80g-bare-metal")
    assert "8× H100 80GB SXM bare metal" in bare
    assert _cell(bare, "hour") == "¥160.00 / hour"
    assert _cell(bare, "month") == "¥128,000.00 / month"
    assert _cell(bare, "trial") == "¥10.00 / hour"
    single = _row(page, "data-offering", "a100-80g-x1")
    assert (_cell(single, "hour"), _cell(single, "month"), _cell(single, "trial")) == (
        "¥8.50 / hour",
        "—",
        "¥0.83 / hour",
    )
    assert _cell(_row(page, "data-offering", "h100-80g-x2"), "trial") == "—"
    # storage at its price now, and no fee for data leaving
    assert "¥0.01" in _row(page, "data-storage", "disk")
    assert "¥0.03" in _row(page, "data-storage", "nas")
    assert "No egress fees" in _row(page, "data-storage", "egress")
    # the cheapest GPU-hour of each model
    assert re.findall(r'data-gpu-model="([^"]+)">.*?home-from-price">([^<]+)<', page, re.S) == [
        ("H100 80GB SXM", "¥20.00"),
        ("A100 80GB SXM", "¥8.00"),
        ("RTX 4090 24GB", "¥2.20"),
    ]
    for link in ('href="/billing/calculator/"', 'href="/clusters/plan/"'):
        assert link in page
    assert 'href="/accounts/signup/" id="home-signup"' in page
    assert 'href="/accounts/login/" id="home-login"' in page


def test_the_price_list_in_chinese(client, seeded):
    page = client.get("/", HTTP_ACCEPT_LANGUAGE="zh-CN").content.decode()

    assert "8× H100 80GB SXM 裸金属整机" in _row(page, "data-offering", "h100-80g-bare-metal")
    assert _cell(_row(page, "data-offering", "h100-80g-bare-metal"), "hour") == "¥160.00 / 小时"


def test_a_signed_in_user_goes_to_the_dashboard(client, db):
    client.force_login(make_user())

    response = client.get("/")

    assert response.status_code == 302 and response.url == "/console/"
