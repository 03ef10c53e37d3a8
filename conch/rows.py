"""Rows the door reads and writes with statements made once, as the ORM would make them.

A message at the gateway's door (``POST /gateway/inbound``) is a handful of one-row
statements, and the ORM's work around each was most of the message's cost: building
the query, compiling it, mapping columns to fields and looking up converters, anew for
every message. The database's own part was a fraction of that.

- :func:`model_from_row`: a model instance from a row a written-out statement read, each
  value converted as the ORM's compiler converts it (a datetime from SQLite's text, a
  bool from its 0 and 1, JSON decoded). ``Manager.raw()`` did the same, with its mapping
  and converters worked out again on every call.
- :func:`model_insert`: ``obj.save()`` of a new row, its INSERT made once per model.
- :func:`model_update`: ``filter(pk=…).update(…)`` of plain values, made once per fields.

Each is held to what the ORM itself writes and reads in tests/conch/test_rows.py.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import connections, router
from django.db.models import Model, signals

M = TypeVar("M", bound=Model)

Converter = Callable[[Any, Any, Any], Any]


def model_from_row(model: type[M], columns: Sequence[str], row: Sequence[Any], *, using: str) -> M:
    """``model`` from ``row``, whose values are the fields ``columns`` names (attnames, in any
    order; fields not named are deferred, and load if asked). Extra values are the caller's."""
    connection = connections[using]
    names, order, converters = _plan(model, tuple(columns), connection.vendor, using)
    values = [row[position] for position in order]
    for index, expression, convert in converters:
        for converter in convert:
            values[index] = converter(values[index], expression, connection)
    return model.from_db(using, names, values)


@functools.cache
def _plan(
    model: type[Model], columns: tuple[str, ...], vendor: str, using: str
) -> tuple[tuple[str, ...], tuple[int, ...], tuple[tuple[int, Any, tuple[Converter, ...]], ...]]:
    """The fields named, in the model's order, where each is in the row, and each one's
    converters (the backend's, then the field's, as ``SQLCompiler.get_converters``)."""
    connection = connections[using]
    fields = [field for field in model._meta.concrete_fields if field.attname in columns]
    unknown = set(columns) - {field.attname for field in model._meta.concrete_fields}
    if unknown:
        raise ValueError(f"{model.__name__} has no fields {sorted(unknown)}")
    converters = []
    for index, field in enumerate(fields):
        expression = field.get_col(model._meta.db_table)
        convert = tuple(connection.ops.get_db_converters(expression)) + tuple(
            expression.get_db_converters(connection)
        )
        if convert:
            converters.append((index, expression, convert))
    return (
        tuple(field.attname for field in fields),
        tuple(columns.index(field.attname) for field in fields),
        tuple(converters),
    )


def model_insert(obj: M, *, using: str | None = None) -> M:
    """Insert ``obj`` (new, its primary key made by the database) as ``obj.save()`` would:
    each field's ``pre_save`` (``auto_now_add``) and preparation for the database, the same
    one statement, and ``obj`` saved afterwards. The statement is made once per model.

    A model with ``pre_save`` or ``post_save`` receivers is saved by ``save()`` itself, so
    that they hear of it: nothing the ORM would do is skipped.
    """
    model = type(obj)
    using = using or router.db_for_write(model, instance=obj)
    if signals.pre_save.has_listeners(model) or signals.post_save.has_listeners(model):
        obj.save(force_insert=True, using=using)
        return obj
    connection = connections[using]
    sql, fields, returns = _insert_plan(model, connection.vendor, using)
    values = [field.get_db_prep_save(field.pre_save(obj, True), connection) for field in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
        pk = cursor.fetchone()[0] if returns else cursor.lastrowid
    obj.pk = pk
    obj._state.adding = False
    obj._state.db = using
    return obj


@functools.cache
def _insert_plan(model: type[Model], vendor: str, using: str) -> tuple[str, tuple, bool]:
    """The INSERT the ORM makes for ``model``: every concrete field but the primary key."""
    connection = connections[using]
    meta = model._meta
    pk = _pk(model)
    if not getattr(pk, "db_returning", False):
        raise ValueError(f"{model.__name__}'s primary key is not made by the database")
    fields = tuple(field for field in meta.concrete_fields if field is not pk)
    qn = connection.ops.quote_name
    returns = connection.features.can_return_columns_from_insert
    sql = (
        f"INSERT INTO {qn(meta.db_table)} ({', '.join(qn(_column(f)) for f in fields)})"
        f" VALUES ({', '.join(['%s'] * len(fields))})"
        + (f" RETURNING {qn(meta.db_table)}.{qn(_column(pk))}" if returns else "")
    )
    return sql, fields, returns


def model_update(model: type[Model], pk: Any, *, using: str | None = None, **values: Any) -> int:
    """``model.objects.filter(pk=pk).update(**values)``, for plain values of concrete fields
    (no expressions), with the statement made once per model and fields: no signals, no
    ``auto_now``, as ``update()``. How many rows it changed."""
    using = using or router.db_for_write(model)
    connection = connections[using]
    sql, fields = _update_plan(model, tuple(values), connection.vendor, using)
    params = [
        field.get_db_prep_save(value, connection)
        for field, value in zip(fields, values.values(), strict=True)
    ]
    params.append(_pk(model).get_db_prep_value(pk, connection))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


@functools.cache
def _update_plan(
    model: type[Model], names: tuple[str, ...], vendor: str, using: str
) -> tuple[str, tuple]:
    connection = connections[using]
    meta = model._meta
    qn = connection.ops.quote_name
    fields = tuple(meta.get_field(name) for name in names)
    if any(not field.concrete or field.primary_key for field in fields):
        raise ValueError(f"{names} are not all plain fields of {model.__name__}")
    sets = ", ".join(f"{qn(_column(field))} = %s" for field in fields)
    where = f"{qn(_column(_pk(model)))} = %s"
    return f"UPDATE {qn(meta.db_table)} SET {sets} WHERE {where}", fields


def _pk(model: type[Model]) -> Any:
    pk = model._meta.pk
    if pk is None:
        raise ValueError(f"{model.__name__} has no primary key")
    return pk


def _column(field: Any) -> str:
    if not field.column:
        raise ValueError(f"{field.name} has no column")
    return field.column
