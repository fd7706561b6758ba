import copy
from fractions import Fraction

import pytest
from django.core.management import call_command

from billing.calculator import PRESETS, TcoJob, round_half_up

URL = "/api/v1/calculator/tco"


def _preset(key: str) -> TcoJob:
    return copy.deepcopy(next(p["input"] for p in PRESETS if p["key"] == key))


def test_round_half_up():
    assert [round_half_up(Fraction(n, 2)) for n in (1, 3, 5, -1, -3)] == [1, 2, 3, -1, -2]
    assert round_half_up(Fraction(2, 3)) == 1 and round_half_up(Fraction(1, 3)) == 0


@pytest.fixture
def seeded(db):
    call_command("seed_catalog", verbosity=0)


def test_1024_gpu_preset(api, seeded):
    result = api.post(URL, _preset("cluster_1024"), format="json").json()

    # lifetime = 1024 × 280,000 + 85,000,000 + 38,000,000 yuan
    assert result["buy"]["lifetime_fen"] == 40_972_000_000
    # ÷ 60 months = 682,866,666.67 fen
    assert result["buy"]["per_month_fen"] == 682_866_667
    # × 42 ÷ (365/12) months = 942,917,260.27
    assert result["buy"]["job_fen"] == 942_917_260
    # 128 nodes × ¥260,000; job 3,328,000,000 × 504/365 + 8,000 GB × 80 fen
    assert result["cloud"]["per_month_fen"] == 3_328_000_000
    assert result["cloud"]["job_fen"] == 4_596_015_342
    # 128 nodes × ¥128,000; 1,638,400,000 × 504/365 = 2,262,338,630.14
    assert result["starverse"]["per_month_fen"] == 1_638_400_000
    assert result["starverse"]["job_fen"] == 2_262_338_630
    assert "lifetime_fen" not in result["cloud"]
    labels = [line["label"] for line in result["buy"]["lines"]]
    assert labels == [
        "GPUs",
        "Other capital expenditure",
        "Operating expenditure",
        "Electricity",
        "Lifetime cost",
        "Per month",
        "This job",
    ]
    assert result["buy"]["lines"][0]["amount_fen"] == 28_672_000_000


def test_single_node_preset(api, seeded):
    result = api.post(URL, _preset("node_8xh100"), format="json").json()

    # 8 × ¥325,000 + 8 kW × ¥1.20 × 8,760 h × 3 years = ¥2,600,000 + ¥252,288
    assert result["buy"]["lifetime_fen"] == 285_228_800
    assert result["buy"]["per_month_fen"] == 7_923_022  # ÷ 36 = 7,923,022.22
    assert result["buy"]["job_fen"] == 95_076_267  # × 12 months = 95,076,266.67
    assert result["buy"]["lines"][3]["amount_fen"] == 25_228_800
    assert result["cloud"]["job_fen"] == 312_000_000
    # the catalog's 8× H100 bare metal node at ¥128,000 a month, as Rent sells it
    assert result["starverse"]["per_month_fen"] == 12_800_000
    assert result["starverse"]["job_fen"] == 153_600_000  # × 12 months
    assert result["starverse"]["offering"]["slug"] == "h100-80g-bare-metal"


def test_the_starverse_column_reads_the_catalog_price(api, seeded):
    from compute.models import Offering

    Offering.objects.filter(slug="h100-80g-bare-metal").update(price_per_month_fen=10_000_000)
    result = api.post(URL, _preset("node_8xh100"), format="json").json()
    assert result["starverse"]["per_month_fen"] == 10_000_000
    assert result["starverse"]["offering"]["price_per_month_fen"] == 10_000_000

    # an offering without a monthly price is priced by the hour around the clock (730 h)
    data = _preset("node_8xh100")
    data["starverse"] = {"offering": "h100-80g-x1"}
    result = api.post(URL, data, format="json").json()
    assert result["starverse"]["per_month_fen"] == 8 * 2200 * 730
    assert "× ¥22.00 per hour × 730 h" in result["starverse"]["lines"][0]["formula"]


def test_an_unknown_or_inactive_offering_names_the_field(api, seeded):
    from compute.models import Offering

    data = _preset("node_8xh100")
    data["starverse"] = {"offering": "h100-80g-x1"}
    Offering.objects.filter(slug="h100-80g-x1").update(active=False)
    for key in ("h100-80g-x1", "no-such-offering"):
        data["starverse"] = {"offering": key}
        response = api.post(URL, data, format="json")
        assert response.status_code == 400
        assert list(response.json()["errors"]) == ["starverse.offering"]


def test_the_page_offers_the_catalog_and_its_presets_name_their_offering(client, seeded):
    page = client.get("/billing/calculator/").content.decode()
    assert 'name="starverse.offering"' in page
    assert '<option value="h100-80g-bare-metal">8× H100 80GB SXM bare metal · ¥160.00' in page
    assert "starverse.node_month" not in page  # no Starverse price of its own to type in
    for preset in PRESETS:
        assert set(preset["input"]["starverse"]) == {"offering"}


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.pop("gpus"), "gpus"),
        (lambda d: d.update(gpus=-8), "gpus"),
        (lambda d: d.update(duration_days=0), "duration_days"),
        (lambda d: d["buy"].update(gpu_unit_fen=-1), "buy.gpu_unit_fen"),
        (lambda d: d["buy"].pop("years"), "buy.years"),
        (lambda d: d["buy"].update(power_kw=-2), "buy.power_kw"),
        (lambda d: d["cloud"].update(gpus_per_node=0), "cloud.gpus_per_node"),
        (lambda d: d["cloud"].update(node_month_fen="lots"), "cloud.node_month_fen"),
        (lambda d: d.pop("starverse"), "starverse"),
        (lambda d: d["starverse"].update(node_month_fen=1.5), "starverse.node_month_fen"),
    ],
)
def test_invalid_input_names_the_field(api, db, mutate, field):
    data = _preset("cluster_1024")
    mutate(data)

    response = api.post(URL, data, format="json")

    assert response.status_code == 400
    assert field in response.json()["errors"], response.json()
    assert response.json()["detail"].startswith(field)
