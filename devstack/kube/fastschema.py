"""A compiled yes/no check for the emulator's JSON schemas, tried before jsonschema.

jsonschema walks the schema for every object it validates: each keyword is looked up, each
``$ref`` resolved through the registry, each error path built, whether or not anything is
wrong. In a 128-rank cluster start that walk was the emulator's largest single cost, though
nearly every object the platform sends is valid. :func:`compile_check` turns a schema into
nested closures once per kind, and :class:`.validation.SchemaValidator` asks it first; only
an object it calls invalid goes through jsonschema, which still produces every message, field
path and the Ignore/Warn pruning, so the answers seen by clients do not change.

The check knows exactly the keywords the strict schemas of ``kubernetes_validate`` use, with
Draft 2020-12 semantics as jsonschema applies them: ``type`` (a name or a list; a bool is not
an integer or a number, ``1.0`` is an integer), ``properties``, ``additionalProperties``
(``false`` or a schema), ``required``, ``items``, ``enum`` (JSON equality: ``True != 1``),
``$ref`` (resolved through the same registry; a recursive definition such as
``JSONSchemaProps`` is compiled once and reached through a cell filled when it is done),
``oneOf``, ``anyOf``, ``allOf`` and ``not``. Annotations (``description``, ``format``, which
jsonschema does not assert without a format checker, ``default``, ``title``, ``$schema``,
``$id``, ``$defs``, ``x-kubernetes-*``) assert nothing. Any other keyword raises
:class:`Unsupported` while compiling, and that kind keeps jsonschema alone: the check may
never call an invalid object valid.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from referencing import Registry

if TYPE_CHECKING:
    from referencing._core import Resolver

Check = Callable[[Any], bool]

_ANNOTATIONS = frozenset(
    {"description", "format", "default", "title", "$schema", "$id", "$defs", "$comment"}
)
_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "additionalProperties",
        "required",
        "items",
        "enum",
        "$ref",
        "oneOf",
        "anyOf",
        "allOf",
        "not",
    }
)


class Unsupported(Exception):
    """The schema uses a keyword the compiled check does not know; use jsonschema alone."""


def _always(value: Any) -> bool:
    return True


def _never(value: Any) -> bool:
    return False


def _is_integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Number)


_TYPE_TESTS: dict[str, Check] = {
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
    "string": lambda value: isinstance(value, str),
    "boolean": lambda value: isinstance(value, bool),
    "null": lambda value: value is None,
    "integer": _is_integer,
    "number": _is_number,
}


def json_equal(one: Any, two: Any) -> bool:
    """Equality as JSON means it: ``True`` is not ``1``, ``1`` is ``1.0``, lists item by item."""
    if isinstance(one, str) or isinstance(two, str):
        return bool(one == two)
    if isinstance(one, bool) or isinstance(two, bool):
        return isinstance(one, bool) and isinstance(two, bool) and one == two
    if isinstance(one, Mapping) and isinstance(two, Mapping):
        return one.keys() == two.keys() and all(json_equal(one[k], two[k]) for k in one)
    if isinstance(one, Sequence) and isinstance(two, Sequence):
        return len(one) == len(two) and all(map(json_equal, one, two))
    return bool(one == two)


def _type_names(names: Any) -> frozenset[str]:
    wanted = frozenset([names] if isinstance(names, str) else names)
    if not wanted or not wanted <= _TYPE_TESTS.keys():
        raise Unsupported(f"type {names!r}")
    return wanted


def _type_check(wanted: frozenset[str]) -> Check:
    """``type`` as one test; a single type, or it or null, gets a closure of its own."""
    plain = {"object": dict, "array": list, "string": str, "boolean": bool}
    rest = wanted - {"null"}
    if len(rest) == 1 and next(iter(rest)) in plain:
        python_type = plain[next(iter(rest))]
        if "null" in wanted:
            return lambda value: value is None or isinstance(value, python_type)
        return lambda value: isinstance(value, python_type)
    tests = [_TYPE_TESTS[name] for name in sorted(wanted)]
    return lambda value: any(test(value) for test in tests)


def _enum_check(values: list[Any]) -> Check:
    if all(isinstance(value, str) for value in values):
        allowed = frozenset(values)
        return lambda value: isinstance(value, str) and value in allowed
    return lambda value: any(json_equal(choice, value) for choice in values)


def _object_check(
    properties: dict[str, Check], additional: Check | None, required: list[str]
) -> Check:
    """``properties``, ``additionalProperties`` and ``required`` in one pass over a dict."""
    closed = additional is _never
    needed = frozenset(required)

    def check(value: dict[str, Any]) -> bool:
        for key, item in value.items():
            test = properties.get(key)
            if test is None:
                if closed:
                    return False
                if additional is not None and not additional(item):
                    return False
            elif not test(item):
                return False
        return needed <= value.keys()

    return check


def _array_check(items: Check) -> Check:
    def check(value: list[Any]) -> bool:
        return all(map(items, value))

    return check


def _one_of(checks: list[Check]) -> Check:
    def check(value: Any) -> bool:
        found = 0
        for test in checks:
            if test(value):
                found += 1
                if found > 1:
                    return False
        return found == 1

    return check


def _any_of(checks: list[Check]) -> Check:
    return lambda value: any(test(value) for test in checks)


def _all_of(checks: list[Check]) -> Check:
    if len(checks) == 1:
        return checks[0]

    def check(value: Any) -> bool:
        return all(test(value) for test in checks)

    return check


def _by_shape(
    types: frozenset[str] | None,
    on_dict: Check | None,
    on_list: Check | None,
    others: list[Check],
) -> Check:
    """Join a schema's parts: its type, then what applies to a dict or a list, then the rest.

    ``properties`` and ``items`` assert nothing about a value of another type, so they run
    only on a dict or a list; a schema whose type is exactly object or array (or either or
    null), the common case, tests the type once.
    """
    rest = _all_of(others) if others else None
    nullable = types is not None and "null" in types
    if rest is None and types is not None and types - {"null"} == {"object"} and on_list is None:
        dict_test = on_dict or _always
        return lambda value: (
            dict_test(value) if isinstance(value, dict) else nullable and value is None
        )
    if rest is None and types is not None and types - {"null"} == {"array"} and on_dict is None:
        list_test = on_list or _always
        return lambda value: (
            list_test(value) if isinstance(value, list) else nullable and value is None
        )
    parts: list[Check] = []
    if types is not None:
        parts.append(_type_check(types))
    if on_dict is not None:
        dict_part = on_dict
        parts.append(lambda value: not isinstance(value, dict) or dict_part(value))
    if on_list is not None:
        list_part = on_list
        parts.append(lambda value: not isinstance(value, list) or list_part(value))
    if rest is not None:
        parts.append(rest)
    return _all_of(parts) if parts else _always


class _Compiler:
    """Compiles one kind's schema; each subschema once, keyed by the dict's identity."""

    def __init__(self) -> None:
        # id(subschema) -> (subschema, cell); the subschema is kept so its id stays unique,
        # the cell holds the check once compiled (empty while a recursive one is compiled)
        self._done: dict[int, tuple[Any, list[Check]]] = {}

    def compile(self, schema: Any, resolver: Resolver[Any]) -> Check:
        if schema is True:
            return _always
        if schema is False:
            return _never
        if not isinstance(schema, dict):
            raise Unsupported(f"schema {schema!r}")
        entry = self._done.get(id(schema))
        if entry is not None:
            cell = entry[1]
            if cell:
                return cell[0]
            # still being compiled: a recursive definition, reached through its cell
            return lambda value: cell[0](value)
        cell = []
        self._done[id(schema)] = (schema, cell)
        check = self._build(schema, resolver)
        cell.append(check)
        return check

    def _build(self, schema: dict[str, Any], resolver: Resolver[Any]) -> Check:
        for keyword in schema:
            if (
                keyword not in _KEYWORDS
                and keyword not in _ANNOTATIONS
                and not keyword.startswith("x-kubernetes-")
            ):
                raise Unsupported(keyword)
        types = _type_names(schema["type"]) if "type" in schema else None
        others: list[Check] = []
        if "$ref" in schema:
            resolved = resolver.lookup(schema["$ref"])
            others.append(self.compile(resolved.contents, resolved.resolver))
        if "enum" in schema:
            others.append(_enum_check(list(schema["enum"])))
        for keyword, join in (("allOf", _all_of), ("anyOf", _any_of), ("oneOf", _one_of)):
            if keyword in schema:
                checks = [self.compile(sub, resolver) for sub in schema[keyword]]
                others.append(join(checks))
        if "not" in schema:
            negated = self.compile(schema["not"], resolver)
            others.append(lambda value: not negated(value))
        on_dict = None
        if {"properties", "additionalProperties", "required"} & schema.keys():
            properties = {
                name: self.compile(sub, resolver)
                for name, sub in (schema.get("properties") or {}).items()
            }
            additional = (
                self.compile(schema["additionalProperties"], resolver)
                if "additionalProperties" in schema
                else None
            )
            on_dict = _object_check(properties, additional, list(schema.get("required") or []))
        on_list = (
            _array_check(self.compile(schema["items"], resolver)) if "items" in schema else None
        )
        if types is None and on_dict is None and on_list is None and len(others) == 1:
            return others[0]
        return _by_shape(types, on_dict, on_list, others)


def compile_check(schema: dict[str, Any], registry: Registry[Any]) -> Check:
    """The yes/no check for ``schema``, its ``$ref``s looked up in ``registry`` from its ``$id``.

    Raises :class:`Unsupported` when the schema, or any definition it reaches, uses a keyword
    this module does not implement.
    """
    resolver = registry.resolver(base_uri=str(schema.get("$id", "")))
    return _Compiler().compile(schema, resolver)
