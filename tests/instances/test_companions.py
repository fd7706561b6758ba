"""An instance's one-to-one rows (instances.models): its stop policy and pod watch exist from
its insert on, whichever way it was inserted, and a monthly rental only for one billed monthly;
readers of an hourly instance meet no missing row, and the admin shows the rows read-only."""

from django.test import Client

from compute.models import Offering
from instances.models import Instance, InstanceEvent, MonthlyRental, PodWatch, StopPolicy
from starverse.core.adminurls import admin_change_url
from starverse.core.text import later
from tests.factories import holding_save, make_instance, make_operator, make_user, staff_login


def _rows(instance_id: str) -> tuple[bool, bool, bool]:
    return (
        StopPolicy.objects.filter(instance_id=instance_id).exists(),
        PodWatch.objects.filter(instance_id=instance_id).exists(),
        MonthlyRental.objects.filter(instance_id=instance_id).exists(),
    )


def test_an_hourly_order_has_a_stop_policy_and_a_pod_watch_and_no_rental(db, client_for):
    user = make_user()
    instance = make_instance(user)

    assert _rows(instance.id) == (True, True, False)
    assert instance.rental is None
    answer = client_for(user).get(f"/api/v1/instances/{instance.id}").json()
    assert (answer["paid_until"], answer["auto_renew"]) == (None, True)
    listed = client_for(user).get("/api/v1/instances").json()["results"][0]
    assert (listed["id"], listed["paid_until"], listed["auto_renew"]) == (instance.id, None, True)


def test_instances_inserted_one_by_one_or_in_bulk_get_their_rows(db):
    user = make_user()
    make_instance(user)  # seeds the catalog
    offering = Offering.objects.get(name="1× H100 80GB SXM")
    fields = {"tenant_id": user.tenant_id, "created_by": user, "image_id": "pytorch-2.1"}

    one = Instance.objects.create(offering=offering, **fields)
    hourly, monthly = Instance.objects.bulk_create(
        [
            Instance(offering=offering, **fields),
            Instance(offering=offering, billing="monthly", **fields),
        ]
    )

    for instance in (one, hourly, monthly):
        holding_save(instance)  # the database's rule: every instance has its holding
    assert [_rows(i.id) for i in (one, hourly, monthly)] == [
        (True, True, False),
        (True, True, False),
        (True, True, True),
    ]
    assert (monthly.monthly.monthly_period, monthly.monthly.auto_renew) == (0, True)


def test_the_admin_shows_the_rows_read_only(db):
    instance = make_instance(make_user())
    StopPolicy.objects.filter(instance=instance).update(idle_warn_minutes=17)
    placed = later("Placed on %(node)s.") % {"node": "gpu-h100-9"}
    InstanceEvent.objects.create(instance=instance, status="provisioning", message=placed)
    client = Client()
    staff_login(client, make_operator())

    page = client.get(admin_change_url("instances_instance", instance.id)).content.decode()

    assert "Automatic stops" in page and "Provisioning" in page
    assert "Monthly rental" not in page
    assert ">17<" in page.replace("\n", "").replace(" ", "")
    assert 'name="stop_policy-0-idle_warn_minutes"' not in page  # not editable
    # the timeline reads as the console shows it, its words filled in
    assert "Placed on gpu-h100-9." in page and "%(node)s" not in page
    monthly = Instance.objects.create(
        tenant_id=instance.tenant_id,
        created_by=instance.created_by,
        offering=instance.offering,
        image=instance.image,
        billing="monthly",
    )
    holding_save(monthly)
    page = client.get(admin_change_url("instances_instance", monthly.id)).content.decode()
    assert "Monthly rental" in page
