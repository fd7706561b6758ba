"""The emulator store's indexes (devstack.kube.store) answer what a look at every object would,
through adds, changes, removals and a restore; and the passes that read them look at what
changed only."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from devstack.kube import volumes
from devstack.kube.api import Api
from devstack.kube.resources import CONFIGMAPS, NAMESPACES, PODS, PVCS
from devstack.kube.store import Store, obj_key
from devstack.kube.validation import Validator
from devstack.kube.volumes import PODS_BY_CLAIM, VolumeResizer, pod_claims

Obj = dict[str, Any]


def _obj(kind: str, namespace: str, name: str, **meta: Any) -> Obj:
    return {"kind": kind, "metadata": {"namespace": namespace, "name": name, **meta}}


def _pod(namespace: str, name: str, claims: list[str], **meta: Any) -> Obj:
    pod = _obj("Pod", namespace, name, **meta)
    pod["spec"] = {
        "volumes": [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims]
    }
    return pod


def _brute(store: Store) -> dict[str, Any]:
    """What each index answers, found by a look at every object."""
    everything = store.everything()
    owners = {
        ref["uid"]
        for obj in everything.values()
        for ref in obj["metadata"].get("ownerReferences") or []
    }
    claims = {
        (obj["metadata"]["namespace"], claim)
        for (key, _ns, _name), obj in everything.items()
        if key == PODS.key
        for _, claim in pod_claims(obj)
    }
    return {
        "namespaces": {
            (key, ns): sorted(name for (k, n, name) in everything if k == key and n == ns)
            for (key, ns, _name) in everything
        },
        "deleting": sorted(
            (key, obj_key(obj))
            for (key, _ns, _name), obj in everything.items()
            if obj["metadata"].get("deletionTimestamp")
        ),
        "owned": {
            uid: sorted(
                (key, obj_key(obj))
                for (key, _ns, _name), obj in everything.items()
                if any(r["uid"] == uid for r in obj["metadata"].get("ownerReferences") or [])
            )
            for uid in owners
        },
        "claims": {
            claim: sorted(
                obj_key(obj)
                for (key, _ns, _name), obj in everything.items()
                if key == PODS.key
                and (obj["metadata"]["namespace"], claim[1]) == claim
                and any(c == claim[1] for _, c in pod_claims(obj))
            )
            for claim in claims
        },
    }


def _indexed(store: Store, brute: dict[str, Any]) -> dict[str, Any]:
    """What the indexes answer, for the same questions."""
    rts = {PODS.key: PODS, CONFIGMAPS.key: CONFIGMAPS}
    return {
        "namespaces": {
            (key, ns): [o["metadata"]["name"] for o in store.items(rts[key], ns)]
            for (key, ns) in brute["namespaces"]
        },
        "deleting": sorted((key, obj_key(obj)) for key, obj in store.deleting()),
        "owned": {
            uid: sorted((k, obj_key(o)) for k, o in store.owned_by(uid)) for uid in brute["owned"]
        },
        "claims": {
            claim: [obj_key(o) for o in store.indexed(PODS_BY_CLAIM, claim)]
            for claim in brute["claims"]
        },
    }


def test_the_indexes_answer_what_a_look_at_every_object_would() -> None:
    store = Store()
    store.add_index(PODS, PODS_BY_CLAIM, volumes.claim_keys)
    store.add(PODS, _pod("a", "p1", ["disk-1", "shared"]))
    store.add(PODS, _pod("a", "p2", ["shared"], ownerReferences=[{"uid": "rs-1"}]))
    store.add(PODS, _pod("b", "p1", ["shared"], ownerReferences=[{"uid": "rs-1"}]))
    store.add(CONFIGMAPS, _obj("ConfigMap", "a", "cm", ownerReferences=[{"uid": "p1-uid"}]))
    steps = [
        # a pod's claims and owners change: it is filed anew
        lambda: store.replace(PODS, _pod("a", "p2", ["disk-2"], ownerReferences=[{"uid": "rs-2"}])),
        # deletion asked: the object is being deleted until it is removed
        lambda: store.replace(
            CONFIGMAPS,
            _obj(
                "ConfigMap", "a", "cm", deletionTimestamp="t", ownerReferences=[{"uid": "p1-uid"}]
            ),
        ),
        lambda: store.remove(PODS, store.get(PODS, "b", "p1") or {}),
        lambda: store.remove(CONFIGMAPS, store.get(CONFIGMAPS, "a", "cm") or {}),
        lambda: store.add(PODS, _pod("b", "p1", ["shared"], deletionTimestamp="t")),
    ]
    for step in steps:
        step()
        brute = _brute(store)
        assert _indexed(store, brute) == brute

    restored = Store()
    restored.add_index(PODS, PODS_BY_CLAIM, volumes.claim_keys)
    objects: dict[str, dict[tuple[str, str], Obj]] = {}
    for (key, ns, name), obj in store.everything().items():
        objects.setdefault(key, {})[(ns, name)] = copy.deepcopy(obj)
    restored.restore(objects, store.resource_version)
    brute = _brute(restored)
    assert _indexed(restored, brute) == brute == _brute(store)
    assert [o["metadata"]["name"] for o in restored.items(PODS, "a")] == ["p1", "p2"]
    assert restored.indexed(PODS_BY_CLAIM, ("a", "shared")) == [restored.get(PODS, "a", "p1")]


def test_a_resize_pass_looks_at_the_claims_that_changed_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = Api(Store(), Validator(schema=False))
    api.create_internal(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "r"}}
    )
    for n in range(30):
        api.create(
            PVCS,
            "r",
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": f"c-{n}"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            },
        )
    resizer = VolumeResizer(api)
    resizer.tick(0.0)

    looked: list[str] = []
    requested = volumes.requested_storage

    def looking(claim: Obj) -> Any:
        looked.append(claim["metadata"]["name"])
        return requested(claim)

    monkeypatch.setattr(volumes, "requested_storage", looking)

    def grow(obj: Obj) -> None:
        obj["spec"]["resources"]["requests"]["storage"] = "2Gi"

    api.mutate(PVCS, "r", "c-7", grow)
    resizer.tick(1.0)
    assert looked == ["c-7"]
    grown = api.store.get(PVCS, "r", "c-7") or {}
    assert grown["status"]["allocatedResources"] == {"storage": "2Gi"}

    looked.clear()
    resizer.tick(2.0)  # its own change: the second step of the expansion
    assert looked == ["c-7"]
    assert (api.store.get(PVCS, "r", "c-7") or {})["status"]["capacity"] == {"storage": "2Gi"}

    looked.clear()
    resizer.tick(3.0)  # its second step changed c-7 once more: nothing left to do
    assert looked == ["c-7"]
    resizer.tick(4.0)
    assert looked == ["c-7"]
