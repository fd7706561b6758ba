import copy
from decimal import Decimal
from fractions import Fraction

import pytest
from django.core.management import call_command
from django.utils import translation

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

    # lifetime = 1024 × 280,000 + 85,000,000 + 38,000,000 yuan + electricity: 128 nodes ×
    # 10.2 kW (DGX H100's maximum) = 1,305.6 kW × PUE 1.3 × ¥0.80 × 8,760 h × 5 years
    assert result["buy"]["lines"][3]["amount_fen"] == 5_947_269_120
    assert result["buy"]["lines"][3]["formula"] == (
        "1,305.6 kW × PUE 1.3 × ¥0.80 per kWh × 8,760 h × 5 years"
    )
    assert result["buy"]["lifetime_fen"] == 46_919_269_120
    # ÷ 60 months = 781,987,818.67 fen
    assert result["buy"]["per_month_fen"] == 781_987_819
    # × 42 ÷ (365/12) months = 1,079,785,919.47
    assert result["buy"]["job_fen"] == 1_079_785_919
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

    # 8 × ¥325,000 + 10.2 kW × PUE 1.3 × ¥0.80 × 8,760 h × 3 years = ¥2,600,000 + ¥278,778.24
    assert result["buy"]["lifetime_fen"] == 287_877_824
    assert result["buy"]["per_month_fen"] == 7_996_606  # ÷ 36 = 7,996,606.22
    assert result["buy"]["job_fen"] == 95_959_275  # × 12 months = 95,959,274.67
    assert result["buy"]["lines"][3]["amount_fen"] == 27_877_824
    assert result["cloud"]["job_fen"] == 312_000_000
    # the catalog's 8× H100 bare metal node at ¥128,000 a month, as Rent sells it
    assert result["starverse"]["per_month_fen"] == 12_800_000
    assert result["starverse"]["job_fen"] == 153_600_000  # × 12 months
    assert result["starverse"]["offering"]["slug"] == "h100-80g-bare-metal"


def test_presets_draw_realistic_power_at_a_chinese_industrial_price():
    # an 8×H100 node draws up to 10.2 kW (NVIDIA DGX H100), in a data centre of PUE 1.3, at
    # ¥0.80 per kWh
    for preset in PRESETS:
        buy = preset["input"]["buy"]
        nodes = preset["input"]["gpus"] // 8
        assert (buy["power_kw"], buy["pue"], buy["electricity_fen_per_kwh"]) == (
            Decimal("10.2") * nodes,
            Decimal("1.3"),
            80,
        ), preset["key"]


def test_pue_is_optional_and_at_least_one(api, seeded):
    data = _preset("node_8xh100")
    del data["buy"]["pue"]
    result = api.post(URL, data, format="json").json()
    # 10.2 kW × ¥0.80 × 8,760 h × 3 years, nothing for cooling
    assert result["buy"]["lines"][3]["amount_fen"] == 21_444_480
    assert result["buy"]["lines"][3]["formula"] == (
        "10.2 kW × PUE 1 × ¥0.80 per kWh × 8,760 h × 3 years"
    )

    data["buy"]["pue"] = Decimal("0.9")
    response = api.post(URL, data, format="json")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["buy.pue"]


def test_the_presets_are_named_in_both_languages():
    with translation.override("zh-hans"):
        assert [(str(p["name"]), str(p["title"])) for p in PRESETS] == [
            (
                "1,024 卡集群，训练 42 天",
                "1,024 卡训练集群，训练 42 天：128 台 8×H100 节点，每台 10.2 kW"
                "（NVIDIA DGX H100 最大功耗），PUE 1.3，¥0.80/kWh",
            ),
            (
                "单台 8×H100 节点，使用 1 年",
                "单台 8×H100 节点使用一年：以 ¥2,600,000 购买、按 3 年折旧，功耗 10.2 kW"
                "（NVIDIA DGX H100 最大功耗）；或按月租用",
            ),
        ]


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
    assert (
        '<option value="h100-80g-bare-metal" data-price="¥160.00 / hour · ¥128,000.00 / month">'
        "8× H100 80GB SXM bare metal</option>"
    ) in page
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
        (lambda d: d["buy"].update(pue=4), "buy.pue"),
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
