"""Label and field selectors as the apiserver parses them (kube emulator, development stand-in).

Label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x,y)``, ``a``, ``!a``.
Field selectors: ``path=value``, ``path==value``, ``path!=value`` over a per-resource allow list.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import bad_request

Labels = dict[str, str]


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: Labels) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "=":
            return present and value == self.values[0]
        if self.op == "!=":
            return not present or value != self.values[0]
        if self.op == "in":
            return present and value in self.values
        if self.op == "notin":
            return not present or value not in self.values
        if self.op == "exists":
            return present
        return not present  # "!"


_KEY = re.compile(
    r"^([a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?/)?[a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?$"
)
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside ``( ... )``."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _check_key(key: str, selector: str) -> str:
    if not _KEY.match(key) or len(key.split("/")[-1]) > 63:
        raise bad_request(f"unable to parse requirement: invalid label key {key!r} in {selector!r}")
    return key


def _check_value(value: str, selector: str) -> str:
    if not _VALUE.match(value) or len(value) > 63:
        raise bad_request(
            f"unable to parse requirement: invalid label value {value!r} in {selector!r}"
        )
    return value


_SET_OP = re.compile(r"^(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)$")


def parse_label_selector(selector: str | None) -> list[Requirement]:
    if not selector or not selector.strip():
        return []
    requirements: list[Requirement] = []
    for part in _split_top_level(selector):
        set_match = _SET_OP.match(part)
        if set_match:
            values = tuple(
                _check_value(v.strip(), selector)
                for v in set_match.group("values").split(",")
                if v.strip()
            )
            if not values:
                raise bad_request(
                    f"unable to parse requirement: for 'in', 'notin' operators, "
                    f"values set can't be empty in {selector!r}"
                )
            requirements.append(
                Requirement(
                    _check_key(set_match.group("key"), selector), set_match.group("op"), values
                )
            )
            continue
        for op, token in (("!=", "!="), ("=", "=="), ("=", "=")):
            if token in part:
                key, value = part.split(token, 1)
                requirements.append(
                    Requirement(
                        _check_key(key.strip(), selector),
                        op,
                        (_check_value(value.strip(), selector),),
                    )
                )
                break
        else:
            if part.startswith("!"):
                requirements.append(Requirement(_check_key(part[1:].strip(), selector), "!"))
            elif " " in part or "(" in part:
                raise bad_request(f"unable to parse requirement: {part!r}")
            else:
                requirements.append(Requirement(_check_key(part, selector), "exists"))
    return requirements


def labels_match(requirements: list[Requirement], labels: Labels | None) -> bool:
    labels = labels or {}
    return all(r.matches(labels) for r in requirements)


# --- field selectors -------------------------------------------------------------------------

_COMMON_FIELDS = ("metadata.name", "metadata.namespace")
SUPPORTED_FIELDS: dict[str, tuple[str, ...]] = {
    "pods": (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    "events": (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    "nodes": ("spec.unschedulable",),
    "namespaces": ("status.phase",),
    "secrets": ("type",),
    "services": ("spec.clusterIP", "spec.type"),
    "persistentvolumeclaims": (),
}
_FIELD_ALIASES = {"source": "source.component"}


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    value: str
    negate: bool

    def matches(self, obj: dict[str, Any]) -> bool:
        actual = field_value(obj, self.path)
        return (actual != self.value) if self.negate else (actual == self.value)


def field_value(obj: dict[str, Any], path: str) -> str:
    current: Any = obj
    for part in _FIELD_ALIASES.get(path, path).split("."):
        if not isinstance(current, dict):
            return ""
        current = current.get(part)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


def _split_unescaped(text: str, sep: str) -> list[str]:
    return re.split(r"(?<!\\)" + re.escape(sep), text)


def parse_field_selector(selector: str | None, resource: str) -> list[FieldRequirement]:
    if not selector or not selector.strip():
        return []
    allowed = _COMMON_FIELDS + SUPPORTED_FIELDS.get(resource, ())
    requirements: list[FieldRequirement] = []
    for part in _split_unescaped(selector, ","):
        part = part.strip()
        if not part:
            continue
        for token, is_negated in (("!=", True), ("==", False), ("=", False)):
            pieces = _split_unescaped(part, token)
            if len(pieces) >= 2:
                path = pieces[0].strip()
                value = _unescape(token.join(pieces[1:]).strip())
                negate = is_negated
                break
        else:
            raise bad_request(f"invalid selector: '{selector}'; can't understand '{part}'")
        if path not in allowed:
            raise bad_request(f"field label not supported: {path}")
        requirements.append(FieldRequirement(path, value, negate))
    return requirements


def fields_match(requirements: list[FieldRequirement], obj: dict[str, Any]) -> bool:
    return all(r.matches(obj) for r in requirements)


def make_filter(
    resource: str, label_selector: str | None, field_selector: str | None
) -> Callable[[dict[str, Any]], bool]:
    """Parse both selectors once (raising BadRequest) and return a matcher for objects."""
    labels = parse_label_selector(label_selector)
    fields = parse_field_selector(field_selector, resource)

    def matcher(obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        return labels_match(labels, meta.get("labels")) and fields_match(fields, obj)

    return matcher


# --- LabelSelector objects and node selector terms (scheduler) ------------------------------


def _numeric(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def expression_matches(expr: dict[str, Any], labels: Labels) -> bool:
    """One ``matchExpressions`` entry (In, NotIn, Exists, DoesNotExist, Gt, Lt)."""
    key = expr.get("key", "")
    op = expr.get("operator", "")
    values = [str(v) for v in expr.get("values") or []]
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and values:
        have, want = _numeric(labels[key]), _numeric(values[0])
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def label_selector_matches(selector: dict[str, Any] | None, labels: Labels | None) -> bool:
    """A ``metav1.LabelSelector`` (matchLabels + matchExpressions); empty matches everything."""
    labels = labels or {}
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(expression_matches(e, labels) for e in selector.get("matchExpressions") or [])


def node_selector_term_matches(term: dict[str, Any], node: dict[str, Any]) -> bool:
    labels = (node.get("metadata") or {}).get("labels") or {}
    fields = {"metadata.name": (node.get("metadata") or {}).get("name", "")}
    expressions = term.get("matchExpressions") or []
    field_exprs = term.get("matchFields") or []
    if not expressions and not field_exprs:
        return False  # an empty term matches no objects
    return all(expression_matches(e, labels) for e in expressions) and all(
        expression_matches(e, fields) for e in field_exprs
    )


def selector_string(selector: dict[str, Any] | None) -> str:
    """A LabelSelector in the string form a Scale's ``status.selector`` carries."""
    parts = [f"{k}={v}" for k, v in sorted(((selector or {}).get("matchLabels") or {}).items())]
    for expr in (selector or {}).get("matchExpressions") or []:
        key, operator = expr.get("key", ""), expr.get("operator", "")
        values = ",".join(sorted(expr.get("values") or []))
        if operator == "Exists":
            parts.append(key)
        elif operator == "DoesNotExist":
            parts.append(f"!{key}")
        else:
            parts.append(f"{key} {operator.lower()} ({values})")
    return ",".join(parts)
