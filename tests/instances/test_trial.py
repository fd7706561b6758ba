"""The trial as promised: ¥10 of trial credit buys an hour of a whole 8×H100 node or twelve of
one A100 at their trial prices. Trial credit pays a minute only at a trial price and only on an
offering that has one; when it cannot, the minute is cash at the standard price, and without
cash the instance stops. The runway is met in either money, the ledger says which price
applied, and Rent says what the trial buys."""

from datetime import timedelta

from billing.models import LedgerTransaction, Wallet
from billing.services import minute_charge_fen, trial_minutes
from instances.lifecycle import instance_order, instance_stop
from instances.metering import metering_tick
from instances.provisioning import converge
from tests.factories import converge_until, fund, make_user


def _running(catalog, user, offering):
    instance, _ = instance_order(
        user=user, offering_id=catalog[offering].id, image_id="pytorch-2.1"
    )
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    return instance


def _usage(instance):
    return LedgerTransaction.objects.filter(instance_id=instance.id, kind="usage").order_by(
        "created_at", "idempotency_key"
    )


def _wallet(user):
    return Wallet.objects.get(tenant=user.tenant)


def test_the_seeded_trial_prices_keep_the_promise(catalog):
    node = catalog["h100_node"]
    a100 = type(node).objects.get(slug="a100-80g-x1")
    assert (node.trial_price_per_hour_fen, a100.trial_price_per_hour_fen) == (1000, 83)
    assert trial_minutes(1000, 1000) == 60  # an hour of the whole 8×H100 node
    assert trial_minutes(1000, 83) == 12 * 60 + 3  # twelve hours of one A100 (¥9.96)
    assert sum(minute_charge_fen(83, m) for m in range(1, 12 * 60 + 1)) == 996
    assert catalog["h100x1"].trial_price_per_hour_fen is None


def test_a_trial_account_runs_the_whole_node_for_an_hour_then_it_stops(catalog):
    user = make_user()  # ¥10 of trial credit, no cash
    instance = _running(catalog, user, "h100_node")
    start = instance.running_since

    metering_tick(now=start + timedelta(minutes=60, seconds=1))

    instance.refresh_from_db()
    assert instance.status == "running"
    [hour] = _usage(instance)  # the hour, posted as one line
    assert (hour.price_kind, hour.cash_delta_fen, hour.minutes) == ("trial", 0, 60)
    assert hour.promo_delta_fen == -1000  # the trial price, not ¥160
    assert (_wallet(user).promo_fen, _wallet(user).cash_fen) == (0, 0)

    result = metering_tick(now=start + timedelta(minutes=61, seconds=1))

    instance.refresh_from_db()
    assert result.exhausted == [instance.id]
    assert instance.status == "stopping"
    last = _usage(instance).last()
    assert (last.price_kind, last.amount_fen, last.promo_delta_fen, last.minutes) == (
        "standard",
        0,
        0,
        1,
    )
    assert instance.cost_fen == 1000


def test_when_the_trial_credit_is_gone_cash_pays_at_the_standard_price(catalog):
    user = make_user()
    fund(user, 100_000)
    Wallet.objects.filter(tenant=user.tenant).update(promo_fen=40)  # audit-breaking: 2 minutes
    instance = _running(catalog, user, "h100_node")
    start = instance.running_since

    metering_tick(now=start + timedelta(minutes=4, seconds=1))

    trial = [minute_charge_fen(1000, m) for m in (1, 2)]  # 17 + 16 fen of trial credit
    standard = [minute_charge_fen(16000, m) for m in (3, 4)]  # ¥2.67 + ¥2.66 of cash
    instance.refresh_from_db()
    assert instance.status == "running"
    assert instance.cost_fen == sum(trial) + sum(standard)
    wallet = _wallet(user)  # held until the hour's posting
    assert (wallet.promo_free_fen, wallet.cash_free_fen) == (
        40 - sum(trial),
        100_000 - sum(standard),
    )

    instance_stop(instance_id=instance.id)  # the stop posts the minutes: one line a price

    rows = [
        (t.price_kind, -t.promo_delta_fen, -t.cash_delta_fen, t.minutes) for t in _usage(instance)
    ]
    assert sorted(rows) == [("standard", 0, sum(standard), 2), ("trial", sum(trial), 0, 2)]
    wallet = _wallet(user)
    assert (wallet.promo_fen, wallet.cash_fen) == (40 - sum(trial), 100_000 - sum(standard))


def test_an_offering_without_a_trial_price_never_spends_trial_credit(catalog):
    user = make_user()
    fund(user, 10_000)
    instance = _running(catalog, user, "h100x1")  # ¥22 an hour, no trial price

    metering_tick(now=instance.running_since + timedelta(minutes=3, seconds=1))
    instance_stop(instance_id=instance.id)

    assert {(t.price_kind, t.promo_delta_fen) for t in _usage(instance)} == {("standard", 0)}
    wallet = _wallet(user)
    assert (wallet.promo_fen, wallet.cash_fen) == (1000, 10_000 - 110)


def test_the_runway_on_trial_credit_at_the_trial_price(catalog, client_for):
    user = make_user()  # ¥10 of trial credit covers one hour of the node at ¥10
    client = client_for(user)

    first = client.post(
        "/api/v1/instances",
        {"offering": catalog["h100_node"].id, "image": "pytorch-2.1"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="trial-1",
    )
    assert first.status_code == 202
    # a second node would need ¥20 of trial credit, or ¥320 of cash: both are said
    second = client.post(
        "/api/v1/instances",
        {"offering": catalog["h100_node"].id, "image": "pytorch-2.1"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="trial-2",
    )
    assert second.status_code == 402
    assert second.json()["detail"] == (
        "Your cash balance of ¥0.00 does not cover ¥320.00: one hour of this instance "
        "(¥160.00) plus one hour of what your running instances burn (¥160.00). Your trial "
        "credit of ¥10.00 does not cover ¥20.00 at the trial prices: one hour of it (¥10.00) "
        "plus one hour of your other instances that have a trial price (¥10.00). Top up to "
        "continue."
    )
    # an offering without a trial price is cash only, and the refusal says so: the header
    # shows the trial credit in the balance, which this offering cannot spend
    refused = client.post(
        "/api/v1/instances",
        {"offering": catalog["h100x1"].id, "image": "pytorch-2.1"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="trial-3",
    )
    assert refused.status_code == 402
    detail = refused.json()["detail"]
    assert detail.startswith("Your cash balance of ¥0.00 does not cover")
    said = detail.split("Your trial credit of ¥10.00 does not pay for this offering; it pays for ")
    assert len(said) == 2, detail
    names = said[1].removesuffix(". Top up to continue.").split(", ")
    assert str(catalog["h100_node"]) in names and str(catalog["h100x1"]) not in names
    # a monthly rental is never paid from trial credit
    monthly = client.post(
        "/api/v1/instances",
        {"offering": catalog["h100_node"].id, "image": "pytorch-2.1", "billing": "monthly"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="trial-4",
    )
    assert monthly.status_code == 402
    assert (
        "Your trial credit of ¥10.00 pays by the hour only, not monthly rentals."
        in (monthly.json()["detail"])
    )


def test_the_ledger_shows_which_price_applied(catalog, client_for, client):
    user = make_user()
    fund(user, 100_000)
    Wallet.objects.filter(tenant=user.tenant).update(promo_fen=17)  # audit-breaking: 1 minute
    instance = _running(catalog, user, "h100_node")
    metering_tick(now=instance.running_since + timedelta(minutes=2, seconds=1))
    instance_stop(instance_id=instance.id)
    rows = client_for(user).get("/api/v1/billing/ledger").json()["results"]
    usage = [
        (r["price_kind"], r["promo_delta_fen"], r["cash_delta_fen"], r["minutes"]) for r in rows[:2]
    ]
    # the stop posts both minutes at the same moment: the page lists them in either order
    assert sorted(usage) == [("standard", 0, -266, 1), ("trial", -17, 0, 1)]
    console = client
    console.force_login(user)
    page = console.get("/billing/").content.decode()
    assert 'data-price-kind="trial">Trial price<' in page
    assert 'data-price-kind="standard">Standard price<' in page


def test_rent_shows_what_the_trial_credit_left_buys(catalog, client):
    user = make_user()
    client.force_login(user)

    page = client.get("/console/rent/").content.decode()

    assert f'data-trial="{catalog["h100_node"].id}">Trial: ¥10.00 buys 1 h 0 min<' in page
    assert f'data-trial="{catalog["h100x1"].id}"' not in page  # no trial price
    Wallet.objects.filter(tenant=user.tenant).update(promo_fen=500)  # audit-breaking
    page = client.get("/console/rent/").content.decode()
    assert "Trial: ¥5.00 buys 0 h 30 min" in page
    offerings = client.get("/api/v1/offerings").json()["results"]
    trial = {o["id"]: o["trial_price_per_hour_fen"] for o in offerings}
    assert (trial[catalog["h100_node"].id], trial[catalog["h100x1"].id]) == (1000, None)


def test_the_instance_page_shows_the_price_charged_now_and_what_comes_after(catalog, client):
    """On trial credit an instance is charged its offering's trial price: its page says that
    price, not the standard one, and what it costs from cash once the trial credit is gone."""
    user = make_user()  # ¥10 of trial credit: an hour of the node at its ¥10 trial price
    node = catalog["h100_node"]
    instance = instance_order(user=user, offering_id=node.id, image_id="pytorch-2.1")[0]
    client.force_login(user)

    html = client.get(f"/console/instances/{instance.id}/").content.decode()

    assert f'data-field="price-now">¥{node.trial_price_per_hour_fen / 100:,.2f}<' in html
    assert (
        f"from your trial credit (about {trial_minutes(1000, node.trial_price_per_hour_fen)} min "
        f"of it left); then ¥{node.price_per_hour_fen / 100:,.2f} an hour from cash" in html
    )
    # without trial credit, the standard price, and nothing about trial credit
    Wallet.objects.filter(tenant=user.tenant).update(promo_fen=0)
    fund(user, 1_000_000)
    html = client.get(f"/console/instances/{instance.id}/").content.decode()
    assert f'data-field="price-now">¥{node.price_per_hour_fen / 100:,.2f}<' in html
    assert "data-trial" not in html


def _yuan(fen):
    return f"¥{fen / 100:,.2f}"


def test_rent_and_the_cluster_order_show_the_price_charged_now(catalog, client):
    """On trial credit Rent's rows, its summary and the cluster order form price an hour as it
    is charged (the trial price, then the standard price from cash), as the instance page does;
    offerings without a trial price, and monthly billing (cash only), keep the standard price."""
    user = make_user()  # ¥10 of trial credit
    node, one = catalog["h100_node"], catalog["h100x1"]
    client.force_login(user)

    rent = client.get(f"/console/rent/?offering={node.id}").content.decode()

    row = rent[rent.index(f'value="{node.id}"') :]
    row = row[: row.index("</label>")]
    assert (
        f'<span class="offer-hour" data-price-now="trial"><strong>'
        f"{_yuan(node.trial_price_per_hour_fen)}</strong>" in row
    )
    assert f"then {_yuan(node.price_per_hour_fen)} / hour from cash" in row
    assert f"{_yuan(node.price_per_month_fen)} / month" in row  # monthly: no trial price
    other = rent[rent.index(f'value="{one.id}"') :]
    other = other[: other.index("</label>")]
    assert f"<strong>{_yuan(one.price_per_hour_fen)}</strong>" in other
    assert "data-price-now" not in other
    assert f'data-sum="price">{_yuan(node.trial_price_per_hour_fen)}<' in rent
    assert (
        f'data-sum="after">At the trial price, from your trial credit; then '
        f"{_yuan(node.price_per_hour_fen)} / hour from cash.<" in rent
    )

    order = client.get(f"/console/clusters/new/?offering={node.id}").content.decode()

    assert f'data-sum="price">{_yuan(2 * node.trial_price_per_hour_fen)}<' in order
    assert f"{_yuan(node.trial_price_per_hour_fen)} per node × 2 nodes" in order
    assert f"then {_yuan(2 * node.price_per_hour_fen)} / hour from cash.<" in order

    # without trial credit: the standard prices, and nothing about trial
    Wallet.objects.filter(tenant=user.tenant).update(promo_fen=0)  # audit-breaking
    rent = client.get(f"/console/rent/?offering={node.id}").content.decode()
    assert f'data-sum="price">{_yuan(node.price_per_hour_fen)}<' in rent
    assert "data-price-now" not in rent
