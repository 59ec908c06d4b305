"""A database of the layout before the rooms carries across with no loss.

The rooms kept the app label, the tables and the migrations, so the proof is a database at
the last migration of the old layout (`PRE_SPLIT`: its state is what the one `actions/models.py`
declared then; `makemigrations --check` on that tree finds nothing), one row in every table of
the app written through the historical models, migrated to the newest migrations and read back
through the rooms' models: every value the same, every table the same name, every column
declared, and `makemigrations` with nothing to write. The tables to fill are enumerated from the
historical app registry, so none is forgotten; a field type the filler does not know fails the
test rather than being skipped.
"""

from __future__ import annotations

import hashlib
import inspect
import io
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.apps import apps as current_apps
from django.conf import settings
from django.core.management import call_command
from django.core.management.color import no_style
from django.db import connection, models
from django.db.migrations.executor import MigrationExecutor

from actions import models as registry

pytestmark = pytest.mark.django_db(transaction=True)

# The last migration before the app was split into rooms (f78998d added none).
PRE_SPLIT = ("actions", "0020_search_indexes")
# The round trip goes back past PRE_SPLIT to the migration before it: PRE_SPLIT is also the
# newest migration so far, so going back to it alone would undo nothing. 0020 only adds
# indexes, so its reverse and re-application must leave every row as it was.
ROUND_TRIP_TO = ("actions", "0019_owner_created_index")

# Values the check constraints ask for, where the generic value would break one.
START = datetime(2031, 5, 17, 9, 30, 1, 250_000, tzinfo=UTC)
CONSTRAINED = {
    # ramp_provider_serves_currency
    "rampaccount": {"currency": "EUR", "provider": "monerium"},
    # spend_permission_ended_no_key (a key only while live) and spend_permission_window.
    "spendpermission": {
        "status": "active",
        "starts_at": START,
        "expires_at": START + timedelta(days=30, microseconds=7),
    },
}


def _migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()  # what is applied now
    return executor


def _latest() -> list[tuple[str, str]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def _text(label: str, n: int, max_length: int | None) -> str:
    text = f"{label}·ü✓{n}"
    if max_length is not None and len(text) > max_length:
        text = hashlib.sha256(text.encode()).hexdigest()[:max_length]
    return text


def _value(model, field, n: int):
    """A value of the field's type that is not its default, different for every field."""
    label = f"{model._meta.model_name}.{field.name}"
    if field.name in CONSTRAINED.get(model._meta.model_name, {}):
        return CONSTRAINED[model._meta.model_name][field.name]
    if field.choices:
        values = [value for value, _ in field.flatchoices if value not in ("", None)]
        others = [value for value in values if value != field.default]
        return (others or values)[-1]
    kind = field.get_internal_type()
    if kind in ("CharField", "SlugField", "EmailField", "URLField"):
        return _text(label, n, field.max_length)
    if kind == "TextField":
        return f"{label}: ünïcødé ✓ #{n}\nsecond line"
    if kind == "PositiveBigIntegerField":
        return 2**62 + n
    if kind == "BigIntegerField":
        return -(2**40) - n
    if kind == "PositiveIntegerField":
        return 2**31 - 1 - n
    if kind == "IntegerField":
        return -(2**30) - n
    if kind == "PositiveSmallIntegerField":
        return 30_000 + n
    if kind == "SmallIntegerField":
        return -32_000 + n
    if kind == "BooleanField":
        return field.default is not True
    if kind == "DateTimeField":
        return START + timedelta(days=n, seconds=n, microseconds=n)
    if kind == "DateField":
        return date(2031, 5, 17) + timedelta(days=n)
    if kind == "DurationField":
        return timedelta(days=n, microseconds=n)
    if kind == "DecimalField":
        return Decimal(n) + Decimal(1).scaleb(-field.decimal_places)
    if kind == "FloatField":
        return n + 0.5
    if kind == "UUIDField":
        return uuid.uuid5(uuid.NAMESPACE_URL, f"picnic:{label}")
    if kind == "JSONField":
        return {"field": label, "n": n, "list": [1, 2.5, True, None], "nested": {"ü": "✓"}}
    if kind == "BinaryField":
        return bytes([n % 256, 0, 255]) + label.encode()
    raise AssertionError(f"{label}: no value for a {kind}; teach _value() this field type")


def _fill(old_apps) -> dict[str, type[models.Model]]:
    """One row in every concrete model of the historical `actions`, every field set (nullable
    foreign keys too, pointing at the other rows); the models by name."""
    old_models = {
        m._meta.model_name: m
        for m in old_apps.get_app_config("actions").get_models()
        if m._meta.managed and not m._meta.proxy
    }
    for model in old_models.values():
        assert not model._meta.many_to_many, f"{model}: teach _fill() many-to-many fields"

    User = old_apps.get_model(settings.AUTH_USER_MODEL)
    Application = old_apps.get_model(settings.OAUTH2_PROVIDER_APPLICATION_MODEL)
    user = User.objects.create(username="before-the-rooms", password="!", email="a@example.com")
    outside = {
        User._meta.label_lower: user.pk,
        Application._meta.label_lower: Application.objects.create(
            name="Old agent",
            user=user,
            client_type="confidential",
            authorization_grant_type="authorization-code",
        ).pk,
    }

    created: dict[str, object] = {}  # model name -> pk
    later: list[tuple[type[models.Model], object, str, str]] = []
    n = 0
    pending = list(old_models.values())
    while pending:
        progress = False
        for model in list(pending):
            fields = [f for f in model._meta.concrete_fields if not f.auto_created]
            targets = {
                f: f.related_model._meta
                for f in fields
                if f.is_relation and f.related_model._meta.app_label == "actions"
            }
            if any(not f.null and meta.model_name not in created for f, meta in targets.items()):
                continue  # a required row is not there yet
            kwargs, deferred = {}, []
            for field in fields:
                n += 1
                if field.is_relation:
                    meta = field.related_model._meta
                    if meta.app_label != "actions":
                        assert meta.label_lower in outside, f"{field}: teach _fill() {meta.label}"
                        kwargs[field.attname] = outside[meta.label_lower]
                    elif meta.model_name in created:
                        kwargs[field.attname] = created[meta.model_name]
                    else:  # nullable: set once its row exists (itself, or a cycle)
                        deferred.append((field.attname, meta.model_name))
                else:
                    kwargs[field.attname] = _value(model, field, n)
            row = model.objects.create(**kwargs)
            created[model._meta.model_name] = row.pk
            later += [(model, row.pk, attname, target) for attname, target in deferred]
            pending.remove(model)
            progress = True
        assert progress, f"required foreign keys go round in a circle: {pending}"
    for model, pk, attname, target in later:
        assert model.objects.filter(pk=pk).update(**{attname: created[target]}) == 1

    for name, model in old_models.items():
        assert model.objects.exists(), f"actions.{name} has no row to carry across"
    return old_models


def _rows(model, fields) -> list[dict]:
    """Every row of the table, field by field (by column attribute), in primary key order."""
    attnames = [f.attname for f in fields]
    rows = list(model._base_manager.order_by("pk").values(*attnames))
    for row in rows:
        for key, value in row.items():
            if isinstance(value, memoryview):
                row[key] = bytes(value)
    return rows


def _room_models() -> dict[str, type[models.Model]]:
    """The current models, each from the room that defines it."""
    found: dict[str, type[models.Model]] = {}
    for room in registry.ROOMS:
        for _, cls in inspect.getmembers(room, inspect.isclass):
            if (
                issubclass(cls, models.Model)
                and cls.__module__ == room.__name__
                and not cls._meta.abstract
            ):
                assert cls._meta.model_name not in found, f"{cls} is in two rooms"
                found[cls._meta.model_name] = cls
    registered = {m._meta.model_name for m in current_apps.get_app_config("actions").get_models()}
    assert set(found) == registered, "every model of the app is defined in a room"
    return found


def _assert_carried(old_models, snapshot) -> None:
    """What the rooms' models read is what the old layout wrote, value for value."""
    rooms = _room_models()
    missing = set(old_models) - set(rooms)
    assert not missing, f"tables of the old layout no room declares: {missing}"
    with connection.cursor() as cursor:
        tables = set(connection.introspection.table_names(cursor))
        for name, old in old_models.items():
            new = rooms[name]
            assert new._meta.db_table == old._meta.db_table, f"{new}: table renamed"
            assert new._meta.db_table in tables
            described = connection.introspection.get_table_description(cursor, new._meta.db_table)
            columns = {column.name for column in described}
            assert columns == {f.column for f in new._meta.concrete_fields}, f"{new}: columns"
            fields = []
            for old_field in old._meta.concrete_fields:
                field = new._meta.get_field(old_field.name)
                assert field.column == old_field.column, f"{new}.{field.name}: column"
                assert field.get_internal_type() == old_field.get_internal_type()
                fields.append(field)
            after = _rows(new, fields)
            before = snapshot[name]
            assert len(after) == len(before), f"{new}: {len(before)} rows became {len(after)}"
            for row_before, row_after in zip(before, after, strict=True):
                changed = {
                    key: (value, row_after[key])
                    for key, value in row_before.items()
                    if row_after[key] != value
                }
                assert not changed, f"{new} row {row_before.get('id')}: {changed}"


def test_a_database_of_the_layout_before_the_rooms_carries_across_with_no_loss():
    latest = _latest()
    old_models = {}
    try:
        executor = _migrate([PRE_SPLIT])
        # The models of what the database holds now: actions at PRE_SPLIT, the apps it
        # points to (auth, oauth2_provider) at their newest.
        applied = [node for node in executor.loader.applied_migrations if node[0] != "actions"]
        old_apps = executor.loader.project_state([PRE_SPLIT, *applied]).apps
        assert {n for n in executor.loader.applied_migrations if n[0] == "actions"} == {
            n for n in executor.loader.graph.forwards_plan(PRE_SPLIT) if n[0] == "actions"
        }, "the database is at the old layout's last migration"
        old_models = _fill(old_apps)
        snapshot = {
            name: _rows(model, model._meta.concrete_fields) for name, model in old_models.items()
        }

        _migrate(latest)
        _assert_carried(old_models, snapshot)

        out = io.StringIO()
        try:
            call_command("makemigrations", "actions", "--check", "--dry-run", stdout=out)
        except SystemExit:
            pytest.fail(f"the rooms' models differ from the migrations:\n{out.getvalue()}")

        # Back past the old layout's last migration and forward again: nothing lost either.
        assert PRE_SPLIT not in _migrate([ROUND_TRIP_TO]).loader.applied_migrations
        _migrate(latest)
        _assert_carried(old_models, snapshot)
    finally:
        _migrate(latest)  # the next test finds the schema it expects
        # Emptied by the old names: the flush after the test goes by the rooms' models, and
        # when they name another table (what this test is for) it cannot empty these.
        tables = [model._meta.db_table for model in old_models.values()]
        connection.ops.execute_sql_flush(
            connection.ops.sql_flush(no_style(), tables, allow_cascade=True)
        )
