"""Object validation for the Kubernetes API emulator (a development stand-in).

Two layers, both answered as ``422 Invalid`` with ``details.causes`` naming the fields:

* the OpenAPI schema of the newest Kubernetes release that ``kubernetes_validate`` ships, in
  strict mode (unknown fields are errors unless the request says ``fieldValidation=Ignore`` or
  ``Warn``, in which case they are dropped, with a warning for ``Warn``);
* the apiserver rules the schema cannot express (see :mod:`.rules`).
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any, NamedTuple

import jsonschema
import kubernetes_validate
from kubernetes_validate import utils as kv_utils
from referencing import Registry, Resource

from . import fastschema, rules
from .errors import FieldError, invalid
from .resources import ResourceType

log = logging.getLogger("devstack.kube")

_PLAIN_SEGMENT = re.compile(r"^[A-Za-z0-9_$]+$")


def schema_version() -> str:
    """The newest Kubernetes version kubernetes_validate has schemas for, e.g. ``1.37.0``."""
    return str(kubernetes_validate.latest_version())


def field_path(parts: Any) -> str:
    """``['spec', 'containers', 0, 'image']`` → ``spec.containers[0].image``."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _PLAIN_SEGMENT.match(str(part)):
            text += f".{part}" if text else str(part)
        else:
            text += f"[{part}]"
    return text


def _types(error: jsonschema.ValidationError) -> list[str]:
    wanted: list[str] = []
    candidates = [error] if error.validator == "type" else list(error.context or [])
    for item in candidates:
        if item.validator != "type":
            continue
        value = item.validator_value
        for name in value if isinstance(value, list) else [value]:
            if name != "null" and name not in wanted:
                wanted.append(name)
    return wanted


def _convert(error: jsonschema.ValidationError) -> list[FieldError]:
    path = list(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = set((error.schema or {}).get("properties") or {})
        return [
            FieldError(
                "FieldValueInvalid", field_path([*path, extra]), "field not declared in schema"
            )
            for extra in error.instance
            if extra not in known
        ]
    if error.validator == "required" and isinstance(error.instance, dict):
        return [
            FieldError("FieldValueRequired", field_path([*path, name]))
            for name in error.validator_value
            if name not in error.instance
        ]
    if error.validator in ("type", "oneOf", "anyOf") and _types(error):
        return [
            FieldError(
                "FieldValueTypeInvalid",
                field_path(path),
                "must be of type " + " or ".join(_types(error)),
                error.instance,
                True,
            )
        ]
    if error.validator == "enum":
        supported = ", ".join(f'"{v}"' for v in error.validator_value if v is not None)
        return [
            FieldError(
                "FieldValueNotSupported",
                field_path(path),
                f"supported values: {supported}",
                error.instance,
                True,
            )
        ]
    return [FieldError("FieldValueInvalid", field_path(path), error.message, None, False)]


class KindSchema(NamedTuple):
    """A kind's jsonschema validator and, unless its schema uses a keyword the compiled check
    does not know, that check (:mod:`.fastschema`), which answers first."""

    validator: jsonschema.protocols.Validator
    check: fastschema.Check | None


class SchemaValidator:
    """Strict JSON-schema validation with per-kind validators cached after the first use.

    A valid object (nearly every object) is told so by the kind's compiled check alone; an
    invalid one goes through jsonschema, whose errors are the answer.
    """

    def __init__(self) -> None:
        self.version = schema_version()
        self._directory = f"kubernetes-json-schema/v{self.version}-local-strict"
        self._lock = threading.Lock()
        self._registry: Registry | None = None
        self._kinds: dict[tuple[str, str], KindSchema | None] = {}
        self._fallback = False

    def schema_for(self, kind: str, api_version: str) -> KindSchema | None:
        """The kind's validator and check, built on first use; None without a schema."""
        key = (kind, api_version)
        with self._lock:
            if key in self._kinds:
                return self._kinds[key]
            group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
            try:
                if self._registry is None:
                    definitions = kv_utils.schema_contents(
                        f"{self._directory}/_definitions.json", self.version
                    )
                    self._registry = Resource.from_contents(definitions) @ Registry()
                schema = kv_utils.schema_contents(
                    f"{self._directory}/{kind.lower()}-{group_version}.json", self.version
                )
            except FileNotFoundError:
                self._kinds[key] = None
                return None
            except Exception:  # an incompatible kubernetes_validate layout
                log.warning("kube-emulator schema cache unavailable; using validate() per call")
                self._fallback = True
                return None
            registry = Resource.from_contents(schema) @ self._registry
            validator = jsonschema.Draft202012Validator(schema, registry=registry)
            try:
                check: fastschema.Check | None = fastschema.compile_check(schema, registry)
            except fastschema.Unsupported as exc:
                log.info("kube-emulator schema kind=%s keyword=%s: jsonschema only", kind, exc)
                check = None
            self._kinds[key] = KindSchema(validator, check)
            return self._kinds[key]

    def errors(self, obj: dict[str, Any]) -> list[jsonschema.ValidationError]:
        kind = self.schema_for(str(obj.get("kind")), str(obj.get("apiVersion")))
        if kind is not None:
            if kind.check is not None and kind.check(obj):
                return []
            return list(kind.validator.iter_errors(obj))
        if not self._fallback:
            return []
        try:
            kubernetes_validate.validate(obj, self.version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            return [exc]
        except kubernetes_validate.SchemaNotFoundError:
            return []
        return []

    def field_errors(
        self, obj: dict[str, Any], field_validation: str
    ) -> tuple[list[FieldError], list[str]]:
        """Schema errors for ``obj``; with Ignore/Warn, unknown fields are pruned in place."""
        warnings: list[str] = []
        for _ in range(20):
            errors = self.errors(obj)
            unknown = [
                e
                for e in errors
                if e.validator == "additionalProperties" and isinstance(e.instance, dict)
            ]
            if field_validation == "Strict" or not unknown:
                break
            for error in unknown:
                known = set((error.schema or {}).get("properties") or {})
                for extra in [k for k in error.instance if k not in known]:
                    del error.instance[extra]
                    if field_validation == "Warn":
                        warnings.append(
                            f'unknown field "{field_path([*error.absolute_path, extra])}"'
                        )
        else:  # pragma: no cover - pathological documents
            errors = self.errors(obj)
        return [item for error in errors for item in _convert(error)], warnings


def _dedupe(errors: list[FieldError]) -> list[FieldError]:
    seen: set[tuple[str, str]] = set()
    unique: list[FieldError] = []
    for item in errors:
        if (item.field, item.reason) not in seen:
            seen.add((item.field, item.reason))
            unique.append(item)
    return unique


class Validator:
    """Entry point used by the API layer for every create, update and patch result."""

    def __init__(self, schema: bool = True) -> None:
        self.schema = SchemaValidator() if schema else None

    def check(
        self,
        rt: ResourceType,
        obj: dict[str, Any],
        old: dict[str, Any] | None = None,
        field_validation: str = "Strict",
    ) -> list[str]:
        """Raise ``422 Invalid`` for a bad object; return warnings for the response header."""
        warnings: list[str] = []
        errors: list[FieldError] = []
        if self.schema is not None:
            errors, warnings = self.schema.field_errors(obj, field_validation)
        try:
            errors = _dedupe(errors + rules.check(rt, obj, old))
        except (TypeError, AttributeError, ValueError):
            if not errors:  # the rules only trip over shapes the schema already rejected
                raise
        if errors:
            name = (obj.get("metadata") or {}).get("name") or ""
            raise invalid(rt.kind, rt.group, name, errors[:50])
        return warnings
