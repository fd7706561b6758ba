"""GET /api/v1/instances: the hot list read (one query for the page and its count, one for
the disks) answers what the ORM-built detail answers, paginated like every list."""

from instances.models import Instance
from instances.volumes import disk_attach
from tests.factories import make_disk, make_instance, make_user


def test_the_list_matches_the_detail_and_pages(client_for, catalog, cluster):
    user = make_user()
    client = client_for(user)
    made = [make_instance(user, status="stopped") for _ in range(4)]
    made.append(make_instance(user, status="failed", cluster=cluster))
    disk = disk_attach(instance=made[0], disk_id=make_disk(user).id)
    make_instance(make_user())  # another tenant's

    first = client.get("/api/v1/instances?page_size=2").json()
    second = client.get(first["next"]).json()
    third = client.get(second["next"]).json()

    assert first["count"] == 5 and first["previous"] is None
    assert second["previous"].endswith("/api/v1/instances?page_size=2")
    assert third["next"] is None and len(third["results"]) == 1
    listed = {row["id"]: row for page in (first, second, third) for row in page["results"]}
    assert set(listed) == {i.id for i in made}
    for instance in made:
        assert listed[instance.id] == client.get(f"/api/v1/instances/{instance.id}").json()
    assert listed[made[0].id]["disks"] == [disk.id]
    newest_first = [row["id"] for page in (first, second, third) for row in page["results"]]
    assert newest_first == [
        i.id for i in Instance.objects.filter(tenant_id=user.tenant_id).order_by("-created_at")
    ]


def test_the_list_filters_and_refuses_what_it_cannot_answer(client_for, catalog, cluster):
    user = make_user()
    client = client_for(user)
    make_instance(user, status="stopped")
    failed = make_instance(user, status="failed", cluster=cluster)

    only_failed = client.get("/api/v1/instances?status=failed").json()
    assert [row["id"] for row in only_failed["results"]] == [failed.id]
    assert only_failed["count"] == 1
    assert client.get("/api/v1/instances?status=bogus").status_code == 400
    assert client.get("/api/v1/instances?page=9").status_code == 404
    assert client.get("/api/v1/instances?page=zero").status_code == 404
    empty = client_for(make_user()).get("/api/v1/instances").json()
    assert (empty["count"], empty["results"], empty["next"]) == (0, [], None)
