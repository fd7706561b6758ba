"""Where money is spent (Rent, the cluster order form, Serve a model, a new disk) and on
Billing, the console says whose wallet pays: the person's own, or the shared wallet of the team
it acts for, with its balance."""

import pytest

from billing.onboarding import team_create
from tests.factories import fund, make_user

PAGES = [
    "/console/rent/",
    "/console/clusters/new/",
    "/console/endpoints/new/",
    "/console/disks/",
    "/billing/",
]


@pytest.mark.parametrize("path", PAGES)
def test_each_page_that_spends_says_whose_wallet_pays(catalog, client, path):
    owner = make_user()  # ¥10 of trial credit on the person's own wallet
    team = team_create(user=owner, name="NLP lab")
    fund(owner, 12_300)  # the person's own wallet: ¥133.00 in all
    client.force_login(owner)

    own = client.get(path).content.decode()

    assert own.count('<p class="charged-to" data-charged-to="own">') == 1
    assert "Charged to: your own wallet (¥133.00)" in own

    assert client.post("/teams/switch/", {"team": team.pk}).status_code == 302
    shared = client.get(path).content.decode()

    assert shared.count('<p class="charged-to" data-charged-to="team">') == 1
    assert "Charged to: team NLP lab’s wallet (¥0.00)" in shared
    assert "your own wallet" not in shared
