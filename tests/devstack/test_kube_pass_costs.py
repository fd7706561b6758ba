"""The emulator's cheaper paths for a pod start answer what the plain ones did: a status write
that copies only the status (devstack.kube.api.Api.mutate's ``touches``), a pod's events read
from an index, one container's paths resolved with its mounts sorted once, the toolset written
with its directories made once, and the passes that skip a look at every pod for nothing."""

from __future__ import annotations

import copy
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from devstack.kube import objects
from devstack.kube.api import Api
from devstack.kube.controllers import Controllers
from devstack.kube.daemonsets import DaemonSetController
from devstack.kube.kubelet import Kubelet
from devstack.kube.objects import set_condition
from devstack.kube.resources import EVENTS, NAMESPACES, NODES, PODS
from devstack.kube.seeding import TOOLSET, tools_install
from devstack.kube.selectors import make_filter
from devstack.kube.store import Store
from devstack.kube.validation import Validator
from devstack.kube.volumedata import HostPath, VolumeData

Obj = dict[str, Any]
NS = "costs"


def _api() -> Api:
    api = Api(Store(), Validator(schema=False))
    for name in (NS, "other"):
        api.create_internal(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
    return api


def _pod(name: str, node: str = "") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "x"},
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "img", "env": [{"name": "A", "value": "1"}]}],
        },
    }


def _starting(obj: Obj) -> None:
    obj.setdefault("status", {})["phase"] = "Pending"
    set_condition(obj, "Ready", "False", "ContainersNotReady", "not yet")


def test_a_status_write_copies_the_status_and_shares_the_unchanged_spec(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(objects, "now_iso", lambda: "2026-01-01T00:00:01Z")
    plain, narrow = _api(), _api()
    for api in (plain, narrow):
        api.create_internal(PODS, _pod("p"))
        api.mutate(PODS, NS, "p", _starting)
    before = narrow.store.get(PODS, NS, "p") or {}
    kept = copy.deepcopy(before)

    def running(obj: Obj) -> None:
        obj["status"]["phase"] = "Running"
        set_condition(obj, "Ready", "True")
        obj["metadata"]["deletionGracePeriodSeconds"] = 0

    want = plain.mutate(PODS, NS, "p", running)
    got = narrow.mutate(PODS, NS, "p", running, touches=("status",)) or {}
    assert got == want
    # the earlier object (a watch's or the history's) is as it was; the new one has its own
    # status and metadata and shares only the spec nothing changed
    assert before == kept
    assert got["status"] is not before["status"]
    assert got["metadata"] is not before["metadata"]
    assert got["spec"] is before["spec"]
    change = narrow.store.changes_after(int(before["metadata"]["resourceVersion"]))[0]
    assert (change.type, change.prev, change.obj) == ("MODIFIED", before, got)

    rv = narrow.store.resource_version
    assert narrow.mutate(PODS, NS, "p", running, touches=("status",)) is got  # nothing changed
    assert narrow.store.resource_version == rv


def test_a_pods_events_come_from_the_index_as_from_every_event() -> None:
    api = _api()
    for n in range(6):
        for pod_namespace in (NS, "other"):
            pod = {"metadata": {"name": f"p{n % 3}", "namespace": pod_namespace, "uid": f"u{n}"}}
            api.events.record(PODS, pod, "Pulled" if n % 2 else "Started", f"message {n}")
    api.store.remove(EVENTS, api.store.items(EVENTS, NS)[0])
    selectors = [
        "involvedObject.name=p1",
        "involvedObject.name=p1,reason=Pulled",
        "reason=Started,involvedObject.name==p2",
        "involvedObject.name!=p1",
        "involvedObject.name=absent",
        "",
    ]
    namespaces: list[str | None] = [NS, "other", None]
    for namespace in namespaces:
        for selector in selectors:
            matcher = make_filter("events", None, selector)
            brute = [
                o["metadata"]["name"] for o in api.store.items(EVENTS, namespace) if matcher(o)
            ]
            listed = api.list(EVENTS, namespace, field_selector=selector)["items"]
            assert [o["metadata"]["name"] for o in listed] == brute, (namespace, selector)
    assert len(api.list(EVENTS, NS, field_selector="involvedObject.name=p1")["items"]) == 2


def test_a_containers_paths_resolve_through_its_mounts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = VolumeData(Store(), tmp_path)
    pod = {
        "metadata": {"namespace": NS, "uid": "u-1"},
        "spec": {"volumes": [{"name": "tools", "emptyDir": {}}, {"name": "sys", "emptyDir": {}}]},
    }
    container = {
        "volumeMounts": [
            {"name": "sys", "mountPath": "/sys-disk"},
            {"name": "sys", "mountPath": "/sys-disk/usr", "subPath": "usr", "readOnly": True},
            {"name": "tools", "mountPath": "/opt/tools/"},
            {"name": "missing", "mountPath": "/gone"},
        ]
    }
    made: list[Any] = []
    base = data._volume_base

    def finding(pod: Obj, volume: Obj | None) -> Path | None:
        made.append(volume and volume["name"])
        return base(pod, volume)

    monkeypatch.setattr(data, "_volume_base", finding)
    resolve = data.resolver(pod, container)
    tools, sys_disk = tmp_path / "pods/u-1/tools", tmp_path / "pods/u-1/sys"
    assert resolve("/opt/tools") == HostPath(tools, False)
    assert resolve("/opt/tools/bin/../sbin/sshd") == HostPath(tools / "sbin/sshd", False)
    assert resolve("/sys-disk/usr/bin") == HostPath(sys_disk / "usr/bin", True)
    assert resolve("/sys-disk/usrx") == HostPath(sys_disk / "usrx", False)
    assert resolve("/sys-disk/.seeded/usr") == HostPath(sys_disk / ".seeded/usr", False)
    assert resolve("/sys-disk/../etc") is None
    assert resolve("/gone/file") is None
    assert resolve("/elsewhere") is None
    assert made == ["tools", "sys", None]  # each volume's directory found once
    assert tools.is_dir() and sys_disk.is_dir()
    assert data.resolve(pod, container, "/opt/tools/bin") == HostPath(tools / "bin", False)


def test_the_toolset_is_written_with_the_files_and_modes_of_plain_writes(tmp_path: Path) -> None:
    data = VolumeData(Store(), tmp_path)
    pod: Obj = {
        "metadata": {"namespace": NS, "uid": "u-2"},
        "spec": {"volumes": [{"name": "t", "emptyDir": {}}]},
    }
    container = {
        "command": ["/opt/starverse/bin/starverse-tools-install", "/stage/sub"],
        "volumeMounts": [{"name": "t", "mountPath": "/stage"}],
    }
    assert tools_install(data, pod, container) == (
        0,
        "starverse-tools-install: starverse/init emulated into /stage/sub",
    )
    target = tmp_path / "pods/u-2/t/sub"
    umask = os.umask(0)
    os.umask(umask)
    written = {
        str(path.relative_to(target)): (path.read_text(), stat.S_IMODE(path.stat().st_mode))
        for path in target.rglob("*")
        if path.is_file()
    }
    assert written == {relative: (text, 0o666 & ~umask) for relative, text in TOOLSET.items()}
    (target / "bin/entrypoint").write_text("changed\n")
    tools_install(data, pod, container)  # a second run writes the toolset over again
    assert (target / "bin/entrypoint").read_text() == TOOLSET["bin/entrypoint"]


def test_a_pass_with_nothing_changed_does_not_look_at_every_pod_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    api = _api()
    api.create_internal(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    api.create_internal(PODS, _pod("bound", "n1"))
    kubelet = Kubelet(api, 0.0, 0.0, 0.0, VolumeData(api.store, tmp_path))
    controllers = Controllers(api, kubelet, eviction_grace_s=5.0)
    daemonsets = DaemonSetController(api)
    listed: list[str] = []
    items = api.store.items

    def counting(rt: Any, namespace: str | None = None) -> list[Obj]:
        listed.append(rt.plural)
        return items(rt, namespace)

    monkeypatch.setattr(api.store, "items", counting)
    controllers.tick(0.0)
    daemonsets.tick(0.0)
    assert listed.count("pods") == 1  # the orphan look; no DaemonSet, so no look for one
    listed.clear()
    controllers.tick(1.0)
    daemonsets.tick(1.0)
    assert "pods" not in listed

    # a pod bound to a node that does not exist: counted from the pass that sees it, deleted
    # after the grace, each pass looking while it is counted
    api.create_internal(PODS, _pod("orphan", "n-gone"))
    controllers.tick(2.0)
    assert listed.count("pods") == 1
    controllers.tick(6.9)
    assert api.store.get(PODS, NS, "orphan") is not None
    assert listed.count("pods") == 2
    controllers.tick(7.0)
    assert api.store.get(PODS, NS, "orphan") is None  # deleted with no grace: removed at once
