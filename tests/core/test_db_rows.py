"""The plain-SQL helpers of the hot paths load and write rows exactly as the ORM does."""

from django.db import connection, transaction
from django.forms.models import model_to_dict

from fleet.models import Node
from instances.models import Instance, InstanceEvent
from starverse.accounts.models import UserSettings
from starverse.core.db import execute_prepared, first_row, insert_together
from tests.factories import holding_save, make_user


def test_first_row_loads_what_the_orm_loads(db):
    user = make_user()
    UserSettings.objects.create(user=user, idle_stop_enabled=False, idle_stop_minutes=45)
    node = Node.objects.create(
        name="gpu-x", gpu_product="p", gpu_count=8, gpu_memory_mb=1, labels={"a": ["b", 1]}
    )
    for model, pk in ((UserSettings, user.pk), (Node, node.pk)):
        column = "user_id" if model is UserSettings else "id"
        loaded = first_row(model, f"{column} = %s", [pk])
        orm = model.objects.get(pk=pk)
        assert loaded is not None
        assert model_to_dict(loaded) == model_to_dict(orm)
        assert {f.attname: getattr(loaded, f.attname) for f in model._meta.concrete_fields} == {
            f.attname: getattr(orm, f.attname) for f in model._meta.concrete_fields
        }
        assert not loaded._state.adding
    assert first_row(UserSettings, "user_id = %s", ["usr_nobody"]) is None


def test_insert_together_writes_parent_and_children_in_one_statement(db, catalog):
    user = make_user()
    instance = Instance(
        tenant_id=user.tenant_id,
        created_by=user,
        offering=catalog["h100x1"],
        image=catalog["image"],
        name="one",
    )
    events = [InstanceEvent(instance=instance, status="queued", message="Ordered.")]
    with transaction.atomic():
        insert_together([instance, *events])
        holding_save(instance)
    stored = Instance.objects.get(pk=instance.pk)
    assert stored.created_at == instance.created_at  # the defaults save() would write
    assert (stored.status, stored.name, instance._state.adding) == ("queued", "one", False)
    assert list(stored.events.values_list("status", "message")) == [("queued", "Ordered.")]


def _prepared_names() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM pg_prepared_statements WHERE name LIKE 'sv_test%%'")
        return [row[0] for row in cursor.fetchall()]


def test_a_prepared_statement_is_planned_once_a_session_and_again_on_a_new_one(
    transactional_db, settings
):
    sql = "SELECT %(a)s::int + %(b)s::int, %(a)s::int"
    with connection.cursor() as cursor:
        execute_prepared(cursor, "sv_test_sum", sql, {"a": 2, "b": 3})
        assert cursor.fetchone() == (5, 2)
        execute_prepared(cursor, "sv_test_sum", sql, {"a": 10, "b": 1})
        assert cursor.fetchone() == (11, 10)
    assert len(_prepared_names()) == 1
    connection.close()  # a new session knows nothing of it: it is prepared again
    with connection.cursor() as cursor:
        execute_prepared(cursor, "sv_test_sum", sql, {"a": 1, "b": 1})
        assert cursor.fetchone() == (2, 1)
    assert len(_prepared_names()) == 1

    settings.DB_PREPARED_STATEMENTS = False
    with connection.cursor() as cursor:
        execute_prepared(cursor, "sv_test_other", sql, {"a": 4, "b": 4})
        assert cursor.fetchone() == (8, 4)
    assert len(_prepared_names()) == 1  # only the first: the second ran as written
