"""apiserver validation rules the OpenAPI schema does not express (kube emulator, a development
stand-in): object names, labels, required pod/service/claim fields, quantities and the fields
that are immutable on update."""

from __future__ import annotations

import base64
import binascii
import copy
import re
from typing import Any

from .errors import FieldError, forbidden, invalid_value, required
from .quantity import QuantityError, parse_quantity
from .resources import ResourceType
from .selectors import label_selector_matches

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    r"for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
POD_UPDATE_MSG = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)


def check_name(rt: ResourceType, name: str, field: str = "metadata.name") -> list[FieldError]:
    if rt.plural == "namespaces":
        pattern, message, limit = DNS1123_LABEL, LABEL_MSG, 63
    elif rt.plural == "services":
        pattern, message, limit = DNS1035_LABEL, DNS1035_MSG, 63
    else:
        pattern, message, limit = DNS1123_SUBDOMAIN, SUBDOMAIN_MSG, 253
    if len(name) > limit:
        return [invalid_value(field, name, f"must be no more than {limit} characters")]
    if not pattern.match(name):
        return [invalid_value(field, name, message)]
    return []


def _check_qualified_key(key: str, field: str) -> list[FieldError]:
    prefix, _, name = key.rpartition("/")
    if (prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix))) or (
        len(name) > 63 or not _LABEL_NAME.match(name)
    ):
        return [
            invalid_value(
                field,
                key,
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
                "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
                "'123-abc', regex used for validation is "
                "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain "
                "prefix and '/' (e.g. 'example.com/MyName')",
            )
        ]
    return []


def check_metadata(rt: ResourceType, meta: dict[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    name = meta.get("name")
    if not name:
        errors.append(required("metadata.name", "name or generateName is required"))
    elif isinstance(name, str):
        errors.extend(check_name(rt, name))
    labels = meta.get("labels") or {}
    if isinstance(labels, dict):
        for key, value in labels.items():
            errors.extend(_check_qualified_key(key, "metadata.labels"))
            if isinstance(value, str) and (len(value) > 63 or not _LABEL_VALUE.match(value)):
                errors.append(
                    invalid_value(
                        "metadata.labels",
                        value,
                        "a valid label must be an empty string or consist of alphanumeric "
                        "characters, '-', '_' or '.', and must start and end with an "
                        "alphanumeric character",
                    )
                )
    for key in meta.get("annotations") or {}:
        errors.extend(_check_qualified_key(key, "metadata.annotations"))
    return errors


def _check_resources(resources: dict[str, Any], field: str) -> list[FieldError]:
    errors: list[FieldError] = []
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    parsed: dict[str, dict[str, Any]] = {"limits": {}, "requests": {}}
    for section, values in (("limits", limits), ("requests", requests)):
        if not isinstance(values, dict):
            continue
        for name, raw in values.items():
            try:
                parsed[section][name] = parse_quantity(raw)
            except (QuantityError, TypeError) as exc:
                errors.append(invalid_value(f"{field}.{section}[{name}]", raw, str(exc)))
                continue
            if parsed[section][name] < 0:
                errors.append(
                    invalid_value(
                        f"{field}.{section}[{name}]", raw, "must be greater than or equal to 0"
                    )
                )
    for name, request in parsed["requests"].items():
        limit = parsed["limits"].get(name)
        extended = "/" in name and not name.startswith(("kubernetes.io/", "hugepages-"))
        if extended:
            if limit is None:
                errors.append(
                    required(
                        f"{field}.limits", "Limit must be set for non overcommitable resources"
                    )
                )
            elif request != limit:
                errors.append(
                    invalid_value(
                        f"{field}.requests[{name}]",
                        str(requests[name]),
                        f"must be equal to {name} limit of {limits[name]}",
                    )
                )
        elif limit is not None and request > limit:
            errors.append(
                invalid_value(
                    f"{field}.requests",
                    str(requests[name]),
                    f"must be less than or equal to {name} limit of {limits[name]}",
                )
            )
    for name, value in list(parsed["limits"].items()) + list(parsed["requests"].items()):
        if "/" in name and not name.startswith("kubernetes.io/") and value.denominator != 1:
            errors.append(
                invalid_value(f"{field}.limits[{name}]", str(value), "must be an integer")
            )
    return errors


def _check_containers(spec: dict[str, Any], key: str) -> list[FieldError]:
    errors: list[FieldError] = []
    names: set[str] = set()
    for index, container in enumerate(spec.get(key) or []):
        if not isinstance(container, dict):
            continue
        field = f"spec.{key}[{index}]"
        name = container.get("name")
        if not name:
            errors.append(required(f"{field}.name"))
        elif isinstance(name, str):
            if len(name) > 63 or not DNS1123_LABEL.match(name):
                errors.append(invalid_value(f"{field}.name", name, LABEL_MSG))
            if name in names:
                errors.append(FieldError("FieldValueDuplicate", f"{field}.name", "", name, True))
            names.add(name)
        if not container.get("image"):
            errors.append(required(f"{field}.image"))
        if isinstance(container.get("resources"), dict):
            errors.extend(_check_resources(container["resources"], f"{field}.resources"))
    return errors


def check_pod(pod: dict[str, Any]) -> list[FieldError]:
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    errors: list[FieldError] = []
    if not spec.get("containers"):
        errors.append(required("spec.containers"))
    errors.extend(_check_containers(spec, "containers"))
    errors.extend(_check_containers(spec, "initContainers"))
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in ("Always", "OnFailure", "Never"):
        errors.append(
            FieldError(
                "FieldValueNotSupported",
                "spec.restartPolicy",
                'supported values: "Always", "OnFailure", "Never"',
                policy,
                True,
            )
        )
    for index, toleration in enumerate(spec.get("tolerations") or []):
        if not isinstance(toleration, dict):
            continue
        field = f"spec.tolerations[{index}]"
        operator = toleration.get("operator", "Equal")
        if operator not in ("Equal", "Exists"):
            errors.append(
                FieldError(
                    "FieldValueNotSupported",
                    f"{field}.operator",
                    'supported values: "Equal", "Exists"',
                    operator,
                    True,
                )
            )
        if operator == "Exists" and toleration.get("value"):
            errors.append(
                invalid_value(
                    f"{field}.operator", operator, "value must be empty when `operator` is 'Exists'"
                )
            )
        effect = toleration.get("effect", "")
        if effect not in ("", "NoSchedule", "PreferNoSchedule", "NoExecute"):
            errors.append(
                FieldError(
                    "FieldValueNotSupported",
                    f"{field}.effect",
                    'supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"',
                    effect,
                    True,
                )
            )
    return errors


def check_service(svc: dict[str, Any]) -> list[FieldError]:
    spec = svc.get("spec") or {}
    errors: list[FieldError] = []
    kind = spec.get("type", "ClusterIP")
    if kind not in ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"):
        errors.append(
            FieldError(
                "FieldValueNotSupported",
                "spec.type",
                'supported values: "ClusterIP", "ExternalName", "LoadBalancer", "NodePort"',
                kind,
                True,
            )
        )
    ports = spec.get("ports") or []
    if not ports and kind != "ExternalName" and spec.get("clusterIP") != "None":
        errors.append(required("spec.ports"))
    names: set[str] = set()
    for index, port in enumerate(ports):
        if not isinstance(port, dict):
            continue
        field = f"spec.ports[{index}]"
        if len(ports) > 1 and not port.get("name"):
            errors.append(required(f"{field}.name"))
        if port.get("name") in names:
            errors.append(
                FieldError("FieldValueDuplicate", f"{field}.name", "", port["name"], True)
            )
        names.add(port.get("name", ""))
        number = port.get("port")
        if isinstance(number, int) and not 1 <= number <= 65535:
            errors.append(
                invalid_value(f"{field}.port", number, "must be between 1 and 65535, inclusive")
            )
        node_port = port.get("nodePort")
        if isinstance(node_port, int) and node_port and not 30000 <= node_port <= 32767:
            errors.append(
                invalid_value(
                    f"{field}.nodePort",
                    node_port,
                    "provided port is not in the valid range. "
                    "The range of valid ports is 30000-32767",
                )
            )
        if port.get("protocol", "TCP") not in ("TCP", "UDP", "SCTP"):
            errors.append(
                FieldError(
                    "FieldValueNotSupported",
                    f"{field}.protocol",
                    'supported values: "SCTP", "TCP", "UDP"',
                    port.get("protocol"),
                    True,
                )
            )
    return errors


def check_pvc(pvc: dict[str, Any]) -> list[FieldError]:
    spec = pvc.get("spec") or {}
    errors: list[FieldError] = []
    modes = spec.get("accessModes") or []
    modes = modes if isinstance(modes, list) else [modes]
    if not modes:
        errors.append(required("spec.accessModes"))
    for mode in modes:
        if mode not in ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"):
            errors.append(
                FieldError(
                    "FieldValueNotSupported",
                    "spec.accessModes",
                    'supported values: "ReadOnlyMany", "ReadWriteMany", '
                    '"ReadWriteOnce", "ReadWriteOncePod"',
                    mode,
                    True,
                )
            )
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    if storage is None:
        errors.append(required("spec.resources[storage]"))
    else:
        try:
            if parse_quantity(storage) <= 0:
                errors.append(
                    invalid_value("spec.resources[storage]", storage, "must be greater than zero")
                )
        except (QuantityError, TypeError) as exc:
            errors.append(invalid_value("spec.resources[storage]", storage, str(exc)))
    return errors


def check_config_data(obj: dict[str, Any], secret: bool) -> list[FieldError]:
    errors: list[FieldError] = []
    sections = ("data", "stringData") if secret else ("data", "binaryData")
    for section in sections:
        for key, value in (obj.get(section) or {}).items():
            if len(key) > 253 or not _CONFIG_KEY.match(key):
                errors.append(
                    invalid_value(
                        f"{section}[{key}]",
                        key,
                        "a valid config key must consist of alphanumeric "
                        "characters, '-', '_' or '.'",
                    )
                )
            if (secret and section == "data") or section == "binaryData":
                try:
                    base64.b64decode(str(value), validate=True)
                except (binascii.Error, ValueError):
                    errors.append(
                        invalid_value(f"{section}[{key}]", "<value>", "illegal base64 data")
                    )
    return errors


def check_pod_update(old: dict[str, Any], new: dict[str, Any]) -> list[FieldError]:
    old_spec, new_spec = old.get("spec") or {}, copy.deepcopy(new.get("spec") or {})
    for key in ("containers", "initContainers"):
        old_list, new_list = old_spec.get(key) or [], new_spec.get(key) or []
        if len(old_list) == len(new_list):
            for old_c, new_c in zip(old_list, new_list, strict=True):
                if isinstance(new_c, dict) and isinstance(old_c, dict) and new_c.get("image"):
                    new_c["image"] = old_c.get("image")
    for key in ("activeDeadlineSeconds", "terminationGracePeriodSeconds"):
        if key in old_spec:
            new_spec[key] = old_spec[key]
        else:
            new_spec.pop(key, None)
    old_tolerations = old_spec.get("tolerations") or []
    new_tolerations = new_spec.get("tolerations") or []
    if all(t in new_tolerations for t in old_tolerations):
        if old_tolerations:
            new_spec["tolerations"] = old_tolerations
        else:
            new_spec.pop("tolerations", None)
    gates = new_spec.get("schedulingGates") or []
    if all(g in (old_spec.get("schedulingGates") or []) for g in gates):
        new_spec["schedulingGates"] = old_spec.get("schedulingGates")
        if new_spec["schedulingGates"] is None:
            new_spec.pop("schedulingGates")
    if new_spec != old_spec:
        changed = sorted(
            k for k in set(old_spec) | set(new_spec) if old_spec.get(k) != new_spec.get(k)
        )
        return [forbidden("spec", f"{POD_UPDATE_MSG} (changed: {', '.join(changed)})")]
    return []


def _storage_request(spec: dict[str, Any]) -> Any:
    return ((spec.get("resources") or {}).get("requests") or {}).get("storage")


def _smaller(new: Any, old: Any) -> bool:
    try:
        return parse_quantity(new) < parse_quantity(old)
    except (QuantityError, TypeError):  # check_pvc reports a bad quantity
        return False


def _keep_old(new: dict[str, Any], old: dict[str, Any], key: str) -> None:
    """Take ``old``'s value of ``key`` into ``new`` (for fields that may change)."""
    if key in old:
        new[key] = copy.deepcopy(old[key])
    else:
        new.pop(key, None)


def check_pvc_update(old: dict[str, Any], new: dict[str, Any]) -> list[FieldError]:
    """ValidatePersistentVolumeClaimUpdate: the spec is immutable, except that an unset
    volumeName may be set once and a bound claim may grow ``resources.requests.storage`` and
    change ``volumeAttributesClassName``; storage may never shrink."""
    old_spec, new_spec = old.get("spec") or {}, copy.deepcopy(new.get("spec") or {})
    if not old_spec.get("volumeName"):
        _keep_old(new_spec, old_spec, "volumeName")
    if (new.get("status") or {}).get("phase") == "Bound":
        requests = (new_spec.get("resources") or {}).get("requests")
        if isinstance(requests, dict):
            _keep_old(requests, (old_spec.get("resources") or {}).get("requests") or {}, "storage")
        if new_spec.get("volumeAttributesClassName") is not None:
            _keep_old(new_spec, old_spec, "volumeAttributesClassName")
    errors: list[FieldError] = []
    if new_spec != old_spec:
        errors.append(
            forbidden(
                "spec",
                "spec is immutable after creation except resources.requests and "
                "volumeAttributesClassName for bound claims",
            )
        )
    if _smaller(_storage_request(new.get("spec") or {}), _storage_request(old_spec)):
        errors.append(
            forbidden(
                "spec.resources.requests.storage", "field can not be less than previous value"
            )
        )
    return errors


def _immutable(old: Any, new: Any, field: str) -> list[FieldError]:
    if old != new:
        return [invalid_value(field, new, "field is immutable")]
    return []


def check_update(rt: ResourceType, old: dict[str, Any], new: dict[str, Any]) -> list[FieldError]:
    errors: list[FieldError] = []
    if rt.plural == "pods":
        errors.extend(check_pod_update(old, new))
    elif rt.plural == "services":
        old_ip = (old.get("spec") or {}).get("clusterIP")
        new_ip = (new.get("spec") or {}).get("clusterIP")
        if old_ip and new_ip and old_ip != new_ip:
            errors.append(invalid_value("spec.clusterIP", new_ip, "field is immutable"))
    elif rt.plural == "persistentvolumeclaims":
        errors.extend(check_pvc_update(old, new))
    elif rt.plural in ("rolebindings", "clusterrolebindings"):
        if old.get("roleRef") != new.get("roleRef"):
            errors.append(invalid_value("roleRef", new.get("roleRef"), "cannot change roleRef"))
    elif rt.plural in ("secrets", "configmaps"):
        if rt.plural == "secrets":
            errors.extend(_immutable(old.get("type"), new.get("type"), "type"))
        if old.get("immutable"):
            for section in ("data", "binaryData", "stringData"):
                if old.get(section) != new.get(section) and section in ("data", "binaryData"):
                    errors.append(forbidden(section, "field is immutable when `immutable` is set"))
            if not new.get("immutable"):
                errors.append(forbidden("immutable", "field is immutable when `immutable` is set"))
    return errors


_ROUTE_HOSTNAME = re.compile(
    r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


def check_httproute(route: dict[str, Any]) -> list[FieldError]:
    """What the Gateway API CRD's schema and rules require of the parts the platform uses:
    host names without ports, a named parent, and Service backends with a port."""
    spec = route.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    errors: list[FieldError] = []
    for index, parent in enumerate(spec.get("parentRefs") or []):
        if not isinstance(parent, dict) or not parent.get("name"):
            errors.append(required(f"spec.parentRefs[{index}].name"))
    for index, hostname in enumerate(spec.get("hostnames") or []):
        if not isinstance(hostname, str) or not _ROUTE_HOSTNAME.match(hostname):
            errors.append(
                invalid_value(
                    f"spec.hostnames[{index}]",
                    hostname,
                    "should match the Gateway API hostname pattern (no port)",
                )
            )
    for r, rule in enumerate(spec.get("rules") or []):
        for b, backend in enumerate((rule or {}).get("backendRefs") or []):
            field = f"spec.rules[{r}].backendRefs[{b}]"
            if not backend.get("name"):
                errors.append(required(f"{field}.name"))
            port = backend.get("port")
            if backend.get("kind", "Service") == "Service" and not (
                isinstance(port, int) and 1 <= port <= 65535
            ):
                errors.append(invalid_value(f"{field}.port", port, "Must have port for Service"))
    return errors


def _percent_or_int(value: Any) -> int | None:
    """0 for a zero ``maxSurge``/``maxUnavailable`` ("0", "0%", 0), else a non-zero marker."""
    text = str(value).rstrip("%")
    return int(text) if text.isdigit() else None


def check_workload(obj: dict[str, Any], deployment: bool) -> list[FieldError]:
    """apps/v1 rules the schema cannot say: a non-empty selector that selects the template's
    labels, non-negative replicas and a rolling update that can make progress."""
    spec = obj.get("spec") or {}
    errors: list[FieldError] = []
    selector = spec.get("selector") or {}
    if not selector.get("matchLabels") and not selector.get("matchExpressions"):
        errors.append(invalid_value("spec.selector", selector, "empty selector is invalid"))
    else:
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        if not label_selector_matches(selector, labels):
            errors.append(
                invalid_value(
                    "spec.template.metadata.labels",
                    labels,
                    "`selector` does not match template `labels`",
                )
            )
    replicas = spec.get("replicas", 1)
    if isinstance(replicas, int) and replicas < 0:
        errors.append(
            invalid_value("spec.replicas", replicas, "must be greater than or equal to 0")
        )
    rolling = ((spec.get("strategy") or {}).get("rollingUpdate") or {}) if deployment else {}
    if (
        rolling
        and _percent_or_int(rolling.get("maxSurge")) == 0
        and _percent_or_int(rolling.get("maxUnavailable")) == 0
    ):
        errors.append(
            invalid_value(
                "spec.strategy.rollingUpdate.maxUnavailable",
                rolling.get("maxUnavailable"),
                "may not be 0 when `maxSurge` is 0",
            )
        )
    return errors


def check_volume_snapshot(snapshot: dict[str, Any]) -> list[FieldError]:
    """The CRD's rule: exactly one of the two sources."""
    source = (snapshot.get("spec") or {}).get("source")
    if not isinstance(source, dict):
        return [required("spec.source")]
    given = [k for k in ("persistentVolumeClaimName", "volumeSnapshotContentName") if source.get(k)]
    if len(given) != 1:
        return [
            invalid_value(
                "spec.source",
                source,
                "exactly one of volumeSnapshotContentName and persistentVolumeClaimName must "
                "be set",
            )
        ]
    return []


def check_http_scaled_object(scaled: dict[str, Any]) -> list[FieldError]:
    """What the KEDA HTTP add-on's CRD schema requires of the fields the stand-in reads."""
    spec = scaled.get("spec") or {}
    errors: list[FieldError] = []
    if not (spec.get("scaleTargetRef") or {}).get("name"):
        errors.append(required("spec.scaleTargetRef.name"))
    bounds = spec.get("replicas") or {}
    low, high = bounds.get("min", 0), bounds.get("max", 100)
    if not isinstance(low, int) or not isinstance(high, int) or low < 0 or high < low:
        errors.append(
            invalid_value("spec.replicas", bounds, "min and max must be integers, 0 <= min <= max")
        )
    metric = (spec.get("scalingMetric") or {}).get("concurrency") or {}
    target = metric.get("targetValue", 100)
    if not isinstance(target, int) or target < 1:
        errors.append(
            invalid_value(
                "spec.scalingMetric.concurrency.targetValue", target, "must be a positive integer"
            )
        )
    return errors


def check(rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    """All non-schema rules for one object (``old`` set on update)."""
    meta = obj.get("metadata")
    errors = check_metadata(rt, meta if isinstance(meta, dict) else {})
    if rt.plural == "pods":
        errors.extend(check_pod(obj))
    elif rt.plural == "services":
        errors.extend(check_service(obj))
    elif rt.plural == "persistentvolumeclaims":
        errors.extend(check_pvc(obj))
    elif rt.plural in ("secrets", "configmaps"):
        errors.extend(check_config_data(obj, rt.plural == "secrets"))
    elif rt.plural == "httproutes":
        errors.extend(check_httproute(obj))
    elif rt.plural in ("deployments", "replicasets"):
        errors.extend(check_workload(obj, rt.plural == "deployments"))
    elif rt.plural == "volumesnapshots":
        errors.extend(check_volume_snapshot(obj))
    elif rt.plural == "httpscaledobjects":
        errors.extend(check_http_scaled_object(obj))
    if old is not None:
        errors.extend(check_update(rt, old, obj))
    return errors
