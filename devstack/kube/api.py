"""Request semantics of the Kubernetes API emulator (a development stand-in): create, get,
list, update, patch and delete with apiserver behaviour — server-set metadata, defaulting,
validation, optimistic concurrency, graceful pod deletion, finalizers, ownerReference garbage
collection and namespace lifecycle. Runs under the store's single lock."""

from __future__ import annotations

import base64
import builtins
import copy
import json
import random
import uuid
from collections.abc import Callable
from typing import Any

from . import errors as err
from .allocators import Allocator
from .defaults import apply_defaults, bind_pvc, now_iso
from .deletion import DeletionMixin
from .events import EventRecorder
from .objects import parse_rv, set_condition, sort_key, strip_type
from .patch import APPLY_PATCH, apply_patch
from .resources import EVENTS, NAMESPACES, PODS, PVCS, SERVICES, ResourceType
from .selectors import field_value, make_filter, parse_field_selector, selector_string
from .store import Obj, Store
from .validation import Validator
from .volumes import PODS_BY_CLAIM, claim_keys

_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"
# Field selectors a namespaced list answers from an index: resource plural -> field path ->
# the index of (namespace, that field's value). An equality requirement on the path names the
# candidates (a pod's events, read by the platform on each poll of a rank, among every event
# of the namespace); the whole selector is still checked on each.
EVENTS_BY_OBJECT = "events-by-involved-object"
_FIELD_INDEXES = {EVENTS.plural: {"involvedObject.name": EVENTS_BY_OBJECT}}


def _meta(obj: Obj) -> Obj:
    return obj.setdefault("metadata", {})


def _spec_content(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


class Api(DeletionMixin):
    # Inside this class `list` is the verb below, so annotations spell the type builtins.list.

    def __init__(self, store: Store, validator: Validator, seed: int | None = None) -> None:
        self.store = store
        store.add_index(PODS, PODS_BY_CLAIM, claim_keys)
        store.add_index(EVENTS, EVENTS_BY_OBJECT, _involved_object)
        self.validator = validator
        self.allocator = Allocator(store, seed)
        self.events = EventRecorder(store)
        self._random = random.Random(seed)

    # --- reads -------------------------------------------------------------------------------

    def get_raw(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self.store.get(rt, namespace, name)
        if obj is None:
            raise err.not_found(rt.plural, rt.group, name)
        return obj

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        return copy.deepcopy(self.get_raw(rt, namespace, name))

    def list(
        self,
        rt: ResourceType,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 0,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> Obj:
        matcher = make_filter(rt.plural, label_selector, field_selector)
        start = ""
        if continue_token:
            try:
                start = json.loads(base64.urlsafe_b64decode(continue_token.encode()))["start"]
            except (ValueError, KeyError, TypeError) as exc:
                raise err.bad_request(f"continue key is not valid: {exc}") from exc
        with self.store.lock:
            if resource_version and resource_version != "0":
                rv = parse_rv(resource_version)
                self.store.check_not_expired(rv)
                self.store.check_not_future(rv)
            current = str(self.store.resource_version)
            items = [o for o in self._candidates(rt, namespace, field_selector) if matcher(o)]
        if start:
            items = [o for o in items if sort_key(o) > start]
        meta: Obj = {"resourceVersion": current}
        if limit and len(items) > limit:
            last = sort_key(items[limit - 1])
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps({"start": last}).encode()
            ).decode()
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        return {
            "kind": rt.list_kind,
            "apiVersion": rt.api_version,
            "metadata": meta,
            "items": [strip_type(o) for o in items],
        }

    def _candidates(
        self, rt: ResourceType, namespace: str | None, field_selector: str | None
    ) -> builtins.list[Obj]:
        """What a list looks at, in its order: the objects an indexed field's value names
        (see ``_FIELD_INDEXES``), else every object of the type (in the namespace)."""
        indexes = _FIELD_INDEXES.get(rt.plural)
        if indexes and namespace is not None:
            for requirement in parse_field_selector(field_selector, rt.plural):
                index = indexes.get(requirement.path)
                if index is not None and not requirement.negate:
                    return self.store.indexed(index, (namespace, requirement.value))
        return self.store.items(rt, namespace)

    # --- create ------------------------------------------------------------------------------

    def _check_type(self, rt: ResourceType, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise err.bad_request(f"the body of the request must be a {rt.kind} object")
        if body.get("kind", rt.kind) != rt.kind or body.get("apiVersion", rt.api_version) != (
            rt.api_version
        ):
            raise err.bad_request(
                f"the API version in the data ({body.get('apiVersion')}) does not match the "
                f"expected API version ({rt.api_version}) or kind ({body.get('kind')} != "
                f"{rt.kind})"
            )
        body = copy.deepcopy(body)
        body["kind"], body["apiVersion"] = rt.kind, rt.api_version
        if not isinstance(body.get("metadata"), dict):
            body["metadata"] = {}
        return body

    def _check_namespace(self, rt: ResourceType, namespace: str, body: Obj, name: str) -> None:
        meta = body["metadata"]
        if not rt.namespaced:
            meta.pop("namespace", None)
            return
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise err.bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        meta["namespace"] = namespace
        ns = self.store.get(NAMESPACES, "", namespace)
        if ns is None:
            raise err.not_found("namespaces", "", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise err.forbidden_error(
                rt.plural,
                rt.group,
                name,
                f"unable to create new content in namespace {namespace} because it is being "
                "terminated",
            )

    def create(
        self,
        rt: ResourceType,
        namespace: str,
        body: Any,
        *,
        dry_run: bool = False,
        field_validation: str = "Strict",
    ) -> tuple[Obj, builtins.list[str]]:
        body = self._check_type(rt, body)
        meta = body["metadata"]
        if meta.get("resourceVersion"):
            raise err.bad_request("resourceVersion should not be set on objects to be created")
        with self.store.lock:
            if not meta.get("name") and meta.get("generateName"):
                for _ in range(10):
                    suffix = "".join(self._random.choice(_SUFFIX_CHARS) for _ in range(5))
                    meta["name"] = f"{meta['generateName']}{suffix}"
                    if self.store.get(rt, namespace, meta["name"]) is None:
                        break
            name = meta.get("name") or ""
            self._check_namespace(rt, namespace, body, name)
            for key in (
                "uid",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "selfLink",
                "managedFields",
            ):
                meta.pop(key, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_iso()
            meta["generation"] = 1
            if rt.status_subresource and rt.plural not in ("nodes",):
                body.pop("status", None)
            apply_defaults(rt.plural, body, creating=True)
            warnings = self.validator.check(rt, body, None, field_validation)
            if self.store.get(rt, namespace, name) is not None:
                raise err.already_exists(rt.plural, rt.group, name)
            if rt is SERVICES:
                self.allocator.assign_service(body, None)
            if rt is PVCS and snapshot_source(body) is None:
                bind_pvc(body)  # one restored from a snapshot waits for it (:mod:`.snapshots`)
            elif rt is PVCS:
                body["status"] = {"phase": "Pending"}
            if dry_run:
                return body, warnings
            return copy.deepcopy(self.store.add(rt, body)), warnings

    def create_internal(self, rt: ResourceType, body: Obj) -> Obj:
        """Create a control-plane object (seed namespaces, nodes, leases) without validation."""
        body = copy.deepcopy(body)
        meta = _meta(body)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_iso())
        meta.setdefault("generation", 1)
        apply_defaults(rt.plural, body, creating=True)
        if rt is SERVICES:
            self.allocator.assign_service(body, None)
        with self.store.lock:
            return self.store.add(rt, body)

    # --- update / patch ----------------------------------------------------------------------

    def _prepare_update(self, rt: ResourceType, old: Obj, new: Obj, subresource: str | None) -> Obj:
        if subresource == "status":
            result = copy.deepcopy(old)
            if "status" in new:
                result["status"] = new["status"]
            return result
        if subresource == "finalize":
            result = copy.deepcopy(old)
            result.setdefault("spec", {})["finalizers"] = (new.get("spec") or {}).get(
                "finalizers"
            ) or []
            return result
        if subresource not in (None, ""):
            raise err.path_not_found()
        result = copy.deepcopy(new)
        if rt.status_subresource:
            if "status" in old:
                result["status"] = copy.deepcopy(old["status"])
            else:
                result.pop("status", None)
        meta, old_meta = _meta(result), old["metadata"]
        for key in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "namespace",
            "generateName",
        ):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta.pop("managedFields", None)
        if old_meta.get("deletionTimestamp"):
            added = [
                f
                for f in meta.get("finalizers") or []
                if f not in (old_meta.get("finalizers") or [])
            ]
            if added:
                raise err.invalid(
                    rt.kind,
                    rt.group,
                    old_meta["name"],
                    [
                        err.forbidden(
                            "metadata.finalizers",
                            f"no new finalizers can be added if the object is being deleted, found "
                            f"new finalizers {json.dumps(added)}",
                        )
                    ],
                )
        if rt is PODS:
            old_spec = old.get("spec") or {}
            spec = result.get("spec")
            if isinstance(spec, dict) and old_spec.get("nodeName") and not spec.get("nodeName"):
                spec["nodeName"] = old_spec["nodeName"]
        return result

    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: str = "Strict",
        precondition_rv: str | None = None,
    ) -> tuple[Obj, builtins.list[str]]:
        body = self._check_type(rt, body)
        with self.store.lock:
            old = self.get_raw(rt, namespace, name)
            meta = body["metadata"]
            if meta.get("name", name) != name:
                raise err.bad_request(
                    f"the name of the object ({meta.get('name')}) does not match the name on "
                    f"the URL ({name})"
                )
            if rt.namespaced and meta.get("namespace", namespace) != namespace:
                raise err.bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            meta["name"] = name
            wanted_rv = (
                precondition_rv if precondition_rv is not None else meta.get("resourceVersion")
            )
            if wanted_rv and wanted_rv != old["metadata"].get("resourceVersion"):
                raise err.conflict(rt.plural, rt.group, name)
            new = self._prepare_update(rt, old, body, subresource)
            apply_defaults(rt.plural, new, creating=False)
            warnings = self.validator.check(
                rt, new, old if subresource in (None, "") else None, field_validation
            )
            if rt is SERVICES and not subresource:
                self.allocator.assign_service(new, old)
            if _spec_content(new) != _spec_content(old):
                _meta(new)["generation"] = int(old["metadata"].get("generation", 1)) + 1
            else:
                _meta(new)["generation"] = old["metadata"].get("generation", 1)
            if dry_run:
                return new, warnings
            return copy.deepcopy(self.commit_update(rt, new)), warnings

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        field_validation: str = "Strict",
    ) -> tuple[Obj, builtins.list[str], bool]:
        """Apply a patch; returns (object, warnings, created) — only apply-patch creates."""
        with self.store.lock:
            old = self.store.get(rt, namespace, name)
            if old is None:
                if content_type == APPLY_PATCH and not subresource:
                    if isinstance(body, dict):
                        _meta(body).setdefault("name", name)
                    obj, warnings = self.create(
                        rt, namespace, body, dry_run=dry_run, field_validation=field_validation
                    )
                    return obj, warnings, True
                raise err.not_found(rt.plural, rt.group, name)
            base = copy.deepcopy(old)
            if content_type == APPLY_PATCH and isinstance(body, dict):
                _meta(body).pop("managedFields", None)
            patched = apply_patch(content_type, base, body)
            if not isinstance(patched, dict):
                raise err.bad_request("the patched document is not a JSON object")
            patched_rv = (patched.get("metadata") or {}).get("resourceVersion")
            rv = old["metadata"].get("resourceVersion")
            if patched_rv and patched_rv != rv:
                raise err.conflict(rt.plural, rt.group, name)
            if isinstance(patched.get("metadata"), dict):
                patched["metadata"]["resourceVersion"] = rv
            obj, warnings = self.update(
                rt,
                namespace,
                name,
                patched,
                subresource=subresource,
                dry_run=dry_run,
                field_validation=field_validation,
            )
            return obj, warnings, False

    def _removable(self, rt: ResourceType, obj: Obj) -> bool:
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp") or meta.get("finalizers"):
            return False
        if meta.get("deletionGracePeriodSeconds"):
            return False
        return not (rt is NAMESPACES and (obj.get("spec") or {}).get("finalizers"))

    def commit_update(self, rt: ResourceType, new: Obj) -> Obj:
        """Store an updated object; an object whose deletion is complete is removed instead."""
        with self.store.lock:
            if self._removable(rt, new):
                return self.remove(rt, new)
            return self.store.replace(rt, new)

    def mutate(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        change: Callable[[Obj], Any],
        *,
        touches: tuple[str, ...] | None = None,
    ) -> Obj | None:
        """Controller write: apply ``change`` to a copy; commit when it changed anything.
        ``touches`` names the only top-level fields ``change`` alters besides ``metadata``
        (None: any): only those are copied, the rest is shared with the stored object, which
        is safe because a stored object is never changed in place (a pod's spec is most of
        it, and a kubelet's write is its status)."""
        with self.store.lock:
            current = self.store.get(rt, namespace, name)
            if current is None:
                return None
            new = _copy_for_change(current, touches)
            if change(new) is False or new == current:
                return current
            return self.commit_update(rt, new)

    # --- scale subresource (deployments, replicasets) -----------------------------------------

    def scale(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        """GET .../{name}/scale: the ``autoscaling/v1`` Scale of a workload."""
        return scale_of(self.get_raw(rt, namespace, name))

    def update_scale(
        self, rt: ResourceType, namespace: str, name: str, body: Any, *, dry_run: bool = False
    ) -> Obj:
        """PUT .../{name}/scale: only ``spec.replicas`` (and a resourceVersion precondition)."""
        if not isinstance(body, dict):
            raise err.bad_request("the body of the request must be a Scale object")
        replicas = (body.get("spec") or {}).get("replicas", 0)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise err.invalid(
                "Scale",
                "autoscaling",
                name,
                [
                    err.invalid_value(
                        "spec.replicas", replicas, "must be greater than or equal to 0"
                    )
                ],
            )
        with self.store.lock:
            current = self.get_raw(rt, namespace, name)
            wanted_rv = (body.get("metadata") or {}).get("resourceVersion")
            if wanted_rv and wanted_rv != current["metadata"].get("resourceVersion"):
                raise err.conflict(rt.plural, rt.group, name)
            new = copy.deepcopy(current)
            new["spec"]["replicas"] = replicas
            stored, _ = self.update(rt, namespace, name, new, dry_run=dry_run)
            return scale_of(stored)

    def patch_scale(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        *,
        dry_run: bool = False,
    ) -> Obj:
        with self.store.lock:
            patched = apply_patch(content_type, self.scale(rt, namespace, name), body)
            return self.update_scale(rt, namespace, name, patched, dry_run=dry_run)

    # --- delete ------------------------------------------------------------------------------

    def bind(self, namespace: str, name: str, binding: Any) -> Obj:
        """POST pods/{name}/binding, as a custom scheduler would."""
        target = binding.get("target") if isinstance(binding, dict) else None
        node = target.get("name") if isinstance(target, dict) else None
        if not node:
            raise err.invalid("Binding", "", name, [err.required("target.name")])
        with self.store.lock:
            pod = self.get_raw(PODS, namespace, name)
            current = (pod.get("spec") or {}).get("nodeName")
            if current:
                raise err.conflict(
                    "pods/binding", "", name, f'pod {name} is already assigned to node "{current}"'
                )

            def assign(obj: Obj) -> None:
                obj["spec"]["nodeName"] = node
                set_condition(obj, "PodScheduled", "True")

            self.mutate(PODS, namespace, name, assign)
        # what the apiserver answers: a bare Success with the create's code
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }


def _involved_object(event: Obj) -> builtins.list[Any]:
    """What ``EVENTS_BY_OBJECT`` files an event under."""
    namespace = (event.get("metadata") or {}).get("namespace") or ""
    return [(namespace, field_value(event, "involvedObject.name"))]


def _copy_for_change(obj: Obj, touches: tuple[str, ...] | None) -> Obj:
    """A copy of ``obj`` whose ``metadata`` and ``touches`` fields (every field: None) are its
    own, for a change to alter; the other fields are the stored object's own dicts."""
    if touches is None:
        return copy.deepcopy(obj)
    new = dict(obj)
    for key in ("metadata", *touches):
        if key in obj:
            new[key] = copy.deepcopy(obj[key])
    return new


def scale_of(obj: Obj) -> Obj:
    """The ``autoscaling/v1`` Scale view of a Deployment or ReplicaSet."""
    meta, spec = obj["metadata"], obj.get("spec") or {}
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            key: meta[key]
            for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if key in meta
        },
        "spec": {"replicas": int(spec.get("replicas", 0))},
        "status": {
            "replicas": int((obj.get("status") or {}).get("replicas", 0)),
            "selector": selector_string(spec.get("selector")),
        },
    }


def snapshot_source(pvc: Obj) -> str | None:
    """The VolumeSnapshot a claim is to be restored from (``dataSource``/``dataSourceRef``)."""
    spec = pvc.get("spec") or {}
    for key in ("dataSourceRef", "dataSource"):
        source = spec.get(key)
        if (
            isinstance(source, dict)
            and source.get("kind") == "VolumeSnapshot"
            and source.get("apiGroup") == "snapshot.storage.k8s.io"
            and source.get("name")
        ):
            return str(source["name"])
    return None
