"""The statements of a transition (`core.lifecycle`): the conditional UPDATE … RETURNING, and on
PostgreSQL the history INSERT in the same statement (a data-modifying CTE), elsewhere its own
INSERT. Each statement is built once per model (and set of columns, or number of history rows)
from the models' meta and run on the connection's cursor; values are adapted by each field as
the ORM's compilers do."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connections, models
from django.db.backends.postgresql import base as postgresql
from django.db.models.sql import UpdateQuery
from psycopg.pq import Format


def one_statement(using: str) -> bool:
    """Whether a transition is one statement here: PostgreSQL runs the conditional UPDATE and
    the history INSERT as one statement (a data-modifying CTE), atomic by itself."""
    return connections[using].vendor == "postgresql"


@dataclass(frozen=True)
class Guard:
    """What a conditional UPDATE also requires, and the rows it reads with it (PostgreSQL): the
    tables of the forward foreign keys `related` names join the UPDATE (`UPDATE … FROM`), `sql`
    is a further condition over the model's table and theirs (each by its table name), with
    `params`, and the joined rows come back on the instance, as `select_related` leaves them.
    So a worker can move a row it has not read, on the condition that what it would have read
    allows the move, and learn what it needs in the same statement."""

    sql: str
    params: Sequence[Any] = ()
    related: tuple[str, ...] = ()


def update_returning(
    model: type[models.Model],
    pk: Any,
    status_field: str,
    current: str,
    values: Mapping[str, Any],
    history: tuple[type[models.Model], str, list[dict[str, Any]]] | None = None,
    fields: tuple[str, ...] | None = None,
    guard: Guard | None = None,
) -> models.Model | None:
    """UPDATE … WHERE pk AND status = current, returning the updated row as an instance (None
    when no row matched): the conditional UPDATE and the read of the row in one statement.
    With `history` (PostgreSQL only), the history rows are inserted by that same statement,
    only if the UPDATE matched (`_with_history`). With `fields`, only those columns (and the
    pk) are returned and loaded; the instance defers the others, as `.only()` would. With a
    `guard` (PostgreSQL only), the UPDATE also requires its condition and returns its related
    rows."""
    manager = model._default_manager
    using = manager.db
    connection = connections[using]
    if guard is not None:
        return _guarded(model, pk, status_field, current, values, history, fields, guard)
    if not connection.features.can_return_rows_from_bulk_insert:  # no UPDATE … RETURNING
        rows = manager.filter(pk=pk, **{status_field: current})
        if rows.update(**values) != 1:
            return None
        return (manager.only(*fields) if fields else manager).get(pk=pk)
    if any(hasattr(value, "resolve_expression") for value in values.values()):
        rows = manager.filter(pk=pk, **{status_field: current})
        query = rows.query.chain(UpdateQuery)
        query.add_update_values(values)
        sql, params = query.get_compiler(using).as_sql()
    else:
        # The statement for this set of columns is built once; each call only adapts values.
        sql, assigned = _update_plan(model, using, status_field, tuple(values))
        params = _update_params(model, assigned, values, pk, status_field, current, connection)
    returning, names, converters = _returning_plan(model, using, fields)
    row = _fetch_one(model, using, f"{sql} {returning}", params, history, connection)
    if row is None:
        return None
    return _load(model, using, names, converters, row, connection)


def _update_params(model, assigned, values, pk, status_field, current, connection) -> list:
    """The UPDATE's values, each adapted by its field, then the pk and the status it requires."""
    meta = model._meta
    return [
        *(_db_value(field, values[name], connection) for name, field in assigned),
        meta.pk.get_db_prep_value(pk, connection),
        meta.get_field(status_field).get_db_prep_value(current, connection),
    ]


def _fetch_one(model, using, sql, params, history, connection) -> tuple | None:
    """Run the UPDATE … RETURNING (with its history rows in the same statement, if any)."""
    if history is not None:
        sql, params = _with_history(model, using, sql, list(params), *history)
    with _binding_cursor(connection) as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def _binding_cursor(connection):
    """On PostgreSQL, a cursor that binds values on the server (psycopg's `Cursor`; Django's
    default is its `ClientCursor`, which quotes each value into the text). A transition's text
    is the same every time, so it is prepared after `DATABASE_PREPARE_THRESHOLD` runs on a
    connection and PostgreSQL stops parsing and planning it. Django turns psycopg's
    preparation off (a threshold of None) for the sake of poolers; its own cursors never
    prepare whatever the threshold, so setting it here prepares only these statements.
    Wrapped as Django wraps its own cursors (errors, query logging, execute wrappers)."""
    if connection.vendor != "postgresql":
        return connection.cursor()
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        raw = connection.connection
        threshold = settings.DATABASE_PREPARE_THRESHOLD or None
        if raw.prepare_threshold != threshold:
            raw.prepare_threshold = threshold
        cursor = postgresql.ServerBindingCursor(raw)
        # As Django's `create_cursor`: timestamps load in the wrapper's zone.
        loader = raw.adapters.get_loader(postgresql.TIMESTAMPTZ_OID, Format.TEXT)
        if connection.timezone != loader.timezone:
            postgresql.register_tzloader(connection.timezone, cursor)
        return connection._prepare_cursor(cursor)  # what `connection.cursor()` returns


def _guarded(model, pk, status_field, current, values, history, fields, guard: Guard):
    """`update_returning` with a `Guard`: `UPDATE <table> SET … FROM <related tables> WHERE
    <pk> AND <status> AND <each join> AND (<guard>) RETURNING <the row>, <each related row>`."""
    using = model._default_manager.db
    connection = connections[using]
    if connection.vendor != "postgresql":
        raise ValueError("a guarded transition needs PostgreSQL's UPDATE … FROM")
    if any(hasattr(value, "resolve_expression") for value in values.values()):
        raise ValueError("a guarded transition writes values, not expressions")
    sql, assigned, names, converters, related = _guarded_plan(
        model, using, status_field, tuple(values), fields, guard.related, guard.sql
    )
    params = _update_params(model, assigned, values, pk, status_field, current, connection)
    row = _fetch_one(model, using, sql, [*params, *guard.params], history, connection)
    if row is None:
        return None
    instance = _load(model, using, names, converters, row[: len(names)], connection)
    start = len(names)
    for field, rel_names, rel_converters in related:
        end = start + len(rel_names)
        rel = _load(
            field.related_model, using, rel_names, rel_converters, row[start:end], connection
        )
        field.set_cached_value(instance, rel)  # as select_related leaves it
        start = end
    return instance


def _load(model, using, names, converters, values, connection) -> models.Model:
    row = list(values)
    for index, (functions, expression) in converters.items():
        for convert in functions:
            row[index] = convert(row[index], expression, connection)
    return model.from_db(using, names, row)


_GUARDED: dict[tuple, tuple] = {}


def _guarded_plan(model, using, status_field, names, only, related, condition) -> tuple:
    """The guarded UPDATE for a model, its columns, `only`, related tables and condition, built
    once: every column is qualified by its table (the joined tables have columns of the same
    names), and a related row's columns are named `<fk>__<column>` in the RETURNING, so the
    history CTE's `u.<pk>` is the model's own."""
    key = (model._meta.label, using, status_field, names, only, related, condition)
    if key not in _GUARDED:
        meta = model._meta
        quote = connections[using].ops.quote_name
        table = quote(meta.db_table)
        assigned = [(name, meta.get_field(name)) for name in names]
        joins, tables, returning, loads = [], [], [], []
        _, main_names, main_converters = _returning_plan(model, using, only)
        columns = {f.attname: f.column for f in meta.concrete_fields}
        returning = [f"{table}.{quote(columns[n])}" for n in main_names]
        for name in related:
            field = meta.get_field(name)
            rel_meta = field.related_model._meta
            rel_table = quote(rel_meta.db_table)
            if rel_table == table or rel_table in tables:
                raise ValueError(f"{name}: a guard joins each table once")
            tables.append(rel_table)
            joins.append(
                f"{rel_table}.{quote(field.target_field.column)} = {table}.{quote(field.column)}"
            )
            _, rel_names, rel_converters = _returning_plan(field.related_model, using)
            rel_columns = {f.attname: f.column for f in rel_meta.concrete_fields}
            returning += [
                f"{rel_table}.{quote(rel_columns[n])} AS {quote(name + '__' + n)}"
                for n in rel_names
            ]
            loads.append((field, rel_names, rel_converters))
        assignments = ", ".join(f"{quote(field.column)} = %s" for _name, field in assigned)
        where = [
            f"{table}.{quote(meta.pk.column)} = %s",
            f"{table}.{quote(meta.get_field(status_field).column)} = %s",
            *joins,
            f"({condition})",
        ]
        _GUARDED[key] = (
            f"UPDATE {table} SET {assignments}{' FROM ' + ', '.join(tables) if tables else ''} "
            f"WHERE {' AND '.join(where)} RETURNING {', '.join(returning)}",
            assigned,
            main_names,
            main_converters,
            loads,
        )
    return _GUARDED[key]


def _db_value(field: models.Field, value: Any, connection) -> Any:
    """A value as the ORM's UPDATE and INSERT compilers adapt it (instances for foreign keys)."""
    if (value is None or isinstance(value, str)) and _plain_text(field):
        return value  # what the ORM's adaptation returns for these, without its calls
    if field.remote_field and hasattr(value, "prepare_database_save"):
        value = value.prepare_database_save(field)
    return field.get_db_prep_save(value, connection)


_PLAIN: dict[models.Field, bool] = {}


def _plain_text(field: models.Field) -> bool:
    """Whether the field adapts a str or None to itself: a CharField or TextField whose class
    keeps Django's own preparation (a custom field's may differ, so it is asked)."""
    plain = _PLAIN.get(field)
    if plain is None:
        kind = type(field)
        plain = _PLAIN[field] = (
            not field.remote_field
            and kind.get_db_prep_save is models.Field.get_db_prep_save
            and kind.get_db_prep_value is models.Field.get_db_prep_value
            and (kind.get_prep_value, kind.to_python)
            in (
                (models.CharField.get_prep_value, models.CharField.to_python),
                (models.TextField.get_prep_value, models.TextField.to_python),
            )
        )
    return plain


_RETURNING: dict[tuple, tuple] = {}


def _returning_plan(
    model: type[models.Model], using: str, only: tuple[str, ...] | None = None
) -> tuple:
    """`RETURNING <every column>` (or the pk and the attributes `only` names), the attribute
    names and the converters of a model's rows, worked out once per model, database and
    `only` (per transition it was a third of the CPU)."""
    key = (model._meta.label, using, only)
    if key not in _RETURNING:
        fields = model._meta.concrete_fields
        if only is not None:
            wanted = {model._meta.get_field(name).attname for name in only}
            fields = [f for f in fields if f.primary_key or f.attname in wanted]
        quote = connections[using].ops.quote_name
        columns = [field.get_col(model._meta.db_table) for field in fields]
        _RETURNING[key] = (
            f"RETURNING {', '.join(quote(field.column) for field in fields)}",
            [field.attname for field in fields],
            # {position: (converters, column)}; each is called with the caller's connection.
            model._default_manager.none().query.get_compiler(using).get_converters(columns),
        )
    return _RETURNING[key]


_UPDATES: dict[tuple, tuple] = {}


def _update_plan(model: type[models.Model], using: str, status_field: str, names: tuple) -> tuple:
    """`UPDATE <table> SET <names> WHERE <pk> = %s AND <status> = %s` and the fields of `names`,
    per model, database and set of columns (compiling the ORM's UPDATE cost more CPU than
    running it)."""
    key = (model._meta.label, using, status_field, names)
    if key not in _UPDATES:
        meta = model._meta
        quote = connections[using].ops.quote_name
        fields = [(name, meta.get_field(name)) for name in names]
        assignments = ", ".join(f"{quote(field.column)} = %s" for _name, field in fields)
        _UPDATES[key] = (
            f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE "
            f"{quote(meta.pk.column)} = %s AND {quote(meta.get_field(status_field).column)} = %s",
            fields,
        )
    return _UPDATES[key]


_CTES: dict[tuple, tuple] = {}


def _with_history(
    model: type[models.Model],
    using: str,
    update: str,
    params: list,
    history_model: type[models.Model],
    fk_name: str,
    rows: list[dict[str, Any]],
) -> tuple[str, list]:
    """`update` (an UPDATE … RETURNING) and the INSERT of the history rows as one statement:
    `WITH u AS (<update>), h AS (INSERT … SELECT … FROM u, (VALUES <rows>)) SELECT * FROM u`.
    The rows are inserted only if the UPDATE matched (they join `u`), in their order
    (ascending ids), and the statement is atomic by itself: no BEGIN/COMMIT, one round trip.
    Each value is cast to its column's type (a VALUES list would otherwise read them as
    text). The INSERT part is built once per history model, database and number of rows."""
    key = (history_model._meta.label, using, len(rows))
    if key not in _CTES:
        meta = history_model._meta
        connection = connections[using]
        quote = connection.ops.quote_name
        fk = meta.get_field(fk_name)
        fields = [f for f in meta.concrete_fields if not f.primary_key and f is not fk]

        def cast(field) -> str:
            kind = field.db_type(connection) or "text"
            # varchar(n) would truncate silently; the INSERT itself checks the length.
            return "text" if kind.startswith(("varchar", "char")) else kind

        row = f"({', '.join(['%s'] + [f'CAST(%s AS {cast(f)})' for f in fields])})"
        names = ", ".join(quote(f.column) for f in fields)
        _CTES[key] = (
            f"INSERT INTO {quote(meta.db_table)} ({quote(fk.column)}, {names}) "
            f"SELECT u.{quote(model._meta.pk.column)}, {', '.join(f'v.{quote(f.column)}' for f in fields)} "
            f"FROM u, (VALUES {', '.join([row] * len(rows))}) AS v(ord, {names}) ORDER BY v.ord",
            fields,
        )
    insert, fields = _CTES[key]
    connection = connections[using]
    values = [
        value
        for position, row in enumerate(rows)
        for value in [
            position,
            *(
                _db_value(f, row[f.attname] if f.attname in row else f.get_default(), connection)
                for f in fields
            ),
        ]
    ]
    return f"WITH u AS ({update}), h AS ({insert}) SELECT * FROM u", [*params, *values]


_INSERTS: dict[tuple, tuple] = {}


def append_history(
    history_model: type[models.Model], using: str, rows: list[dict[str, Any]]
) -> None:
    """The history rows of a transition (one per step): one INSERT, built once per history
    model, database and number of rows; each row's values by attribute name, every other
    column its field's default. The rows get ascending ids in their order."""
    key = (history_model._meta.label, using, len(rows))
    if key not in _INSERTS:
        meta = history_model._meta
        quote = connections[using].ops.quote_name
        fields = [f for f in meta.concrete_fields if not f.primary_key]
        row = f"({', '.join(['%s'] * len(fields))})"
        _INSERTS[key] = (
            f"INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
            f"VALUES {', '.join([row] * len(rows))}",
            fields,
        )
    sql, fields = _INSERTS[key]
    connection = connections[using]
    params = [
        _db_value(f, values[f.attname] if f.attname in values else f.get_default(), connection)
        for values in rows
        for f in fields
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
