"""The emulator's volume directories (devstack.kube.volumedata) as claims, snapshot contents and
pods come and go, driven pass by pass on a store of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from devstack.kube.api import Api
from devstack.kube.resources import NAMESPACES, PODS, PVCS
from devstack.kube.store import Store
from devstack.kube.validation import Validator
from devstack.kube.volumedata import SWEEP_S, VolumeData

NS = "vols"


def _api(history_size: int = 1000) -> Api:
    api = Api(Store(history_size), Validator(schema=False))
    api.create_internal(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
    )
    return api


def _claim(api: Api, name: str) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    stored, _warnings = api.create(PVCS, NS, body)
    return stored


def _volume(claim: dict[str, Any]) -> str:
    return str(claim["spec"]["volumeName"])


def test_a_claim_change_looks_at_that_claim_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = _api()
    data = VolumeData(api.store, tmp_path)
    claims = [_claim(api, f"c-{n}") for n in range(20)]
    data.tick(0.0)
    assert {p.name for p in tmp_path.iterdir()} == {_volume(c) for c in claims}

    asked: list[str] = []
    volume_dir = data.volume_dir

    def asking(name: str) -> Path:
        asked.append(name)
        return volume_dir(name)

    monkeypatch.setattr(data, "volume_dir", asking)
    new = _claim(api, "c-new")
    data.tick(1.0)
    # the one new claim's directory made; the other 20 claims not looked at again
    assert asked == [_volume(new)]
    assert data.volume_dir(_volume(new)).is_dir()

    asked.clear()
    api.store.remove(PVCS, api.store.get(PVCS, NS, "c-3") or {})
    data.tick(2.0)
    assert asked == [_volume(claims[3])]
    assert not data.volume_dir(_volume(claims[3])).exists()
    assert {p.name for p in tmp_path.iterdir()} == {
        _volume(c) for c in [*claims[:3], *claims[4:], new]
    }


def test_a_claim_that_is_no_longer_bound_loses_its_directory(tmp_path: Path) -> None:
    api = _api()
    data = VolumeData(api.store, tmp_path)
    claim = _claim(api, "lost")
    data.tick(0.0)
    (data.volume_dir(_volume(claim)) / "file").write_text("kept until unbound\n")

    api.mutate(PVCS, NS, "lost", lambda obj: obj["status"].update(phase="Lost"))
    data.tick(1.0)
    assert not data.volume_dir(_volume(claim)).exists()


def test_a_deleted_pods_empty_dirs_go_and_strays_go_at_the_next_sweep(tmp_path: Path) -> None:
    api = _api()
    data = VolumeData(api.store, tmp_path)
    pod = api.create_internal(
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": NS},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        },
    )
    data.tick(0.0)
    scratch = data.empty_dir(pod["metadata"]["uid"], "scratch")
    scratch.mkdir(parents=True)
    api.store.remove(PODS, pod)
    data.tick(1.0)
    assert not scratch.parent.exists()

    # written for the pod after it went (an exec racing the deletion): no change names it, so
    # it stays until the next full look
    scratch.mkdir(parents=True)
    _claim(api, "other")
    data.tick(2.0)
    assert scratch.exists()
    _claim(api, "another")
    data.tick(SWEEP_S + 0.5)
    assert not scratch.parent.exists()


def test_a_history_that_no_longer_reaches_back_is_a_full_look(tmp_path: Path) -> None:
    api = _api(history_size=2)  # a short history: older changes are compacted
    data = VolumeData(api.store, tmp_path)
    data.tick(0.0)
    claims = [_claim(api, f"c-{n}") for n in range(5)]
    data.tick(1.0)
    assert {p.name for p in tmp_path.iterdir()} == {_volume(c) for c in claims}
