"""The kube emulator running a training job's pod through the official kubernetes client: the
simulated trainer (``starverse-sim-train``), volumes that keep files across pods and nodes,
exit codes and pod phases by restartPolicy, and ``pods/log`` as the kubelet serves it."""

from __future__ import annotations

import datetime as dt
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream

from devstack.kube import KubeEmulator
from devstack.kube.resources import PODS
from devstack.kube.trainer import BadArgs, TrainerArgs, loss_at, trainer_args
from tests.devstack import error_body, wait_for

NS = "training"
IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
NODE_A, NODE_B, NODE_A100 = "gpu-h100-0", "gpu-h100-1", "gpu-a100-0"
TIMEOUT_S = 10.0


def setup_namespace(api: client.CoreV1Api, *claims: str) -> None:
    api.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    for claim in claims:
        api.create_namespaced_persistent_volume_claim(
            NS,
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "10Gi"}},
                },
            },
        )


def trainer_pod(
    name: str,
    command: list[str],
    *,
    node: str | None = NODE_A,
    claim: str | None = "ckpt",
    restart: str = "Never",
    env: dict[str, str] | None = None,
    gpus: int = 0,
    **container: Any,
) -> dict[str, Any]:
    """A job rank's pod: the command in ``main``, the claim (or an emptyDir, ``claim=None``)
    mounted at /ckpt, checkpoints under /ckpt/run."""
    values = {"STARVERSE_CHECKPOINT_DIR": "/ckpt/run", **(env or {})}
    main: dict[str, Any] = {
        "name": "main",
        "image": IMAGE,
        "command": command,
        "env": [{"name": k, "value": v} for k, v in values.items()],
        "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
        **container,
    }
    if gpus:
        main["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    volume: dict[str, Any] = (
        {"name": "ckpt", "persistentVolumeClaim": {"claimName": claim}}
        if claim
        else {"name": "ckpt", "emptyDir": {}}
    )
    spec: dict[str, Any] = {
        "restartPolicy": restart,
        "tolerations": [TOLERATION],
        "containers": [main],
        "volumes": [volume],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def train(steps: int, step_s: float, *extra: str) -> list[str]:
    return ["starverse-sim-train", "--steps", str(steps), "--step-seconds", str(step_s), *extra]


def read(api: client.CoreV1Api, name: str) -> client.V1Pod:
    return api.read_namespaced_pod(name, NS)


def wait_phase(api: client.CoreV1Api, name: str, phase: str) -> client.V1Pod:
    """The pod once its phase is ``phase``, awaited on a watch."""
    stream = watch.Watch().stream(
        api.list_namespaced_pod,
        NS,
        field_selector=f"metadata.name={name}",
        timeout_seconds=int(TIMEOUT_S),
    )
    for event in stream:
        if event["object"].status.phase == phase:
            return event["object"]
    raise AssertionError(f"pod {name} never reached {phase}: {read(api, name).status}")


def log(api: client.CoreV1Api, name: str, **query: Any) -> str:
    return str(api.read_namespaced_pod_log(name, NS, **query))


def step_lines(first: int, last: int, steps: int) -> list[str]:
    return [f"step {k}/{steps} loss={loss_at(k):.4f}" for k in range(first, last + 1)]


def volume_of(emu: KubeEmulator, api: client.CoreV1Api, claim: str) -> Path:
    volume = api.read_namespaced_persistent_volume_claim(claim, NS).spec.volume_name
    return emu.volume_data.volume_dir(volume)


def condition(pod: client.V1Pod, kind: str) -> client.V1PodCondition:
    return next(c for c in pod.status.conditions if c.type == kind)


# --- the trainer to the end, and failing ----------------------------------------------------


def test_trainer_runs_to_the_end_and_the_pod_succeeds_with_exit_0(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    setup_namespace(api, "ckpt")
    script = f"cd /workspace && {' '.join(train(3, 0.05))} && echo finished"
    api.create_namespaced_pod(
        NS, trainer_pod("rank-0", ["bash", "-lc", script], env={"RANK": "0", "NODE_RANK": "0"})
    )

    pod = wait_phase(api, "rank-0", "Succeeded")

    status = pod.status.container_statuses[0]
    terminated = status.state.terminated
    assert (terminated.exit_code, terminated.reason, terminated.message) == (0, "Completed", None)
    assert terminated.container_id == status.container_id
    assert terminated.finished_at >= terminated.started_at
    assert (status.ready, status.restart_count) == (False, 0)
    assert (condition(pod, "Ready").status, condition(pod, "Ready").reason) == (
        "False",
        "PodCompleted",
    )
    assert condition(pod, "ContainersReady").reason == "PodCompleted"
    assert log(api, "rank-0").splitlines() == [
        "RANK=0",
        "NODE_RANK=0",
        "starting at step 0",
        *step_lines(1, 3, 3),
        "done",
    ]
    assert (volume_of(emu, api, "ckpt") / "run" / "step").read_text() == "3\n"


def test_fail_at_fails_the_pod_with_the_exit_code_and_the_log_as_its_message(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    setup_namespace(api, "ckpt")
    api.create_namespaced_pod(
        NS,
        trainer_pod(
            "rank-0",
            train(5, 0.05, "--fail-at", "3", "--exit-code", "7"),
            terminationMessagePolicy="FallbackToLogsOnError",
        ),
    )

    pod = wait_phase(api, "rank-0", "Failed")

    expected = [
        "starting at step 0",
        *step_lines(1, 2, 5),
        "error: simulated failure at step 3/5 (exit code 7)",
    ]
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (7, "Error")
    assert terminated.message == "\n".join(expected)
    assert (condition(pod, "Ready").status, condition(pod, "Ready").reason) == (
        "False",
        "PodFailed",
    )
    assert log(api, "rank-0").splitlines() == expected
    assert (volume_of(emu, api, "ckpt") / "run" / "step").read_text() == "2\n"
    reasons = {
        e.reason
        for e in api.list_namespaced_event(NS, field_selector="involvedObject.name=rank-0").items
    }
    assert "BackOff" not in reasons  # restartPolicy Never: no restart


def test_a_second_pod_on_another_node_resumes_from_the_checkpointed_step(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    setup_namespace(api, "ckpt")
    api.create_namespaced_pod(NS, trainer_pod("rank-0-a", train(4, 0.05, "--fail-at", "3")))
    wait_phase(api, "rank-0-a", "Failed")

    api.create_namespaced_pod(
        NS,
        trainer_pod(
            "rank-0-b",
            train(4, 0.05, "--fail-at", "3"),  # past the resumed step only if it reaches it
            node=NODE_B,
            env={"STARVERSE_RESTART_COUNT": "1"},
        ),
    )
    pod = wait_phase(api, "rank-0-b", "Failed")

    assert pod.spec.node_name == NODE_B
    assert log(api, "rank-0-b").splitlines() == [
        "STARVERSE_RESTART_COUNT=1",
        "resumed from step 2",
        "error: simulated failure at step 3/4 (exit code 1)",
    ]
    api.create_namespaced_pod(NS, trainer_pod("rank-0-c", train(4, 0.05), node=NODE_B))
    wait_phase(api, "rank-0-c", "Succeeded")
    assert log(api, "rank-0-c").splitlines() == [
        "resumed from step 2",
        *step_lines(3, 4, 4),
        "done",
    ]


def test_on_failure_restarts_a_failed_trainer_and_leaves_a_finished_one(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    setup_namespace(api, "ckpt")
    api.create_namespaced_pod(
        NS, trainer_pod("looping", train(3, 0.05, "--fail-at", "2"), restart="OnFailure")
    )
    api.create_namespaced_pod(
        NS, trainer_pod("finishing", train(1, 0.05), claim=None, restart="OnFailure")
    )

    def restarted_twice() -> client.V1ContainerStatus | None:
        statuses = read(api, "looping").status.container_statuses or []
        return statuses[0] if statuses and statuses[0].restart_count >= 2 else None

    last = wait_for(restarted_twice, "a second restart", TIMEOUT_S).last_state.terminated
    assert (last.exit_code, last.reason) == (1, "Error")
    assert read(api, "looping").status.phase == "Running"
    assert wait_phase(api, "finishing", "Succeeded").status.container_statuses[0].restart_count == 0


# --- pods/log ----------------------------------------------------------------------------------


def test_follow_streams_lines_as_they_come_and_ends_when_the_container_exits(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    setup_namespace(api, "ckpt")
    api.create_namespaced_pod(NS, trainer_pod("rank-0", train(4, 0.3)))
    wait_for(lambda: read(api, "rank-0").status.phase == "Running", "running", TIMEOUT_S)

    response = api.read_namespaced_pod_log("rank-0", NS, follow=True, _preload_content=False)
    arrivals: list[tuple[float, str]] = []
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            arrivals.append((time.monotonic(), line.decode()))
    response.release_conn()

    assert [line for _, line in arrivals] == ["starting at step 0", *step_lines(1, 4, 4), "done"]
    # each step arrived when it was logged, not all at the end
    assert arrivals[-1][0] - arrivals[1][0] >= 0.3
    assert read(api, "rank-0").status.phase == "Succeeded"


def test_follow_through_watch_stream_and_a_finished_log_ends_at_once(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    setup_namespace(api, "ckpt")
    api.create_namespaced_pod(NS, trainer_pod("rank-0", train(3, 0.1)))
    wait_for(lambda: read(api, "rank-0").status.phase == "Running", "running", TIMEOUT_S)
    followed: list[str] = []

    def follow() -> None:
        followed.extend(watch.Watch().stream(api.read_namespaced_pod_log, "rank-0", NS))

    reader = threading.Thread(target=follow)
    reader.start()
    reader.join(TIMEOUT_S)

    assert not reader.is_alive()
    assert followed == ["starting at step 0", *step_lines(1, 3, 3), "done"]
    after_exit = list(watch.Watch().stream(api.read_namespaced_pod_log, "rank-0", NS, tail_lines=1))
    assert after_exit == ["done"]


def test_follow_ends_when_the_pod_is_deleted(emu: KubeEmulator, api: client.CoreV1Api) -> None:
    setup_namespace(api)
    api.create_namespaced_pod(NS, trainer_pod("sshd", ["/usr/sbin/sshd", "-D"], claim=None))
    wait_for(lambda: read(api, "sshd").status.phase == "Running", "running", TIMEOUT_S)
    lines: list[str] = []
    reader = threading.Thread(
        target=lambda: lines.extend(watch.Watch().stream(api.read_namespaced_pod_log, "sshd", NS))
    )
    reader.start()
    wait_for(lambda: lines, "the banner", TIMEOUT_S)

    api.delete_namespaced_pod("sshd", NS, grace_period_seconds=0)
    reader.join(TIMEOUT_S)

    assert not reader.is_alive()
    assert lines == [
        "[kube emulator] container main of pod training/sshd is emulated (development "
        "stand-in): no process runs, so there is no output."
    ]


def step_until(emu: KubeEmulator, check: Callable[[], Any], what: str) -> Any:
    """Drive the paused emulator one pass at a time until ``check()`` holds."""
    for _ in range(50):
        value = check()
        if value:
            return value
        emu.step(0.05)
    raise AssertionError(f"{what} never happened")


def test_previous_tail_since_timestamps_and_limit_bytes(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    setup_namespace(api)
    first = [
        "starting at step 0",
        *step_lines(1, 2, 5),
        "error: simulated failure at step 3/5 (exit code 1)",
    ]
    with emu.paused():
        api.create_namespaced_pod(
            NS,
            trainer_pod("rank-0", train(5, 1, "--fail-at", "3"), claim=None, restart="OnFailure"),
        )
        step_until(emu, lambda: read(api, "rank-0").status.phase == "Running", "running")
        with pytest.raises(ApiException) as caught:
            log(api, "rank-0", previous=True)
        assert caught.value.status == 400
        assert error_body(caught.value)["message"] == (
            'previous terminated container "main" in pod "rank-0" not found'
        )
        emu.step(1)
        emu.step(1)
        emu.step(1)  # steps 1 and 2, then the failure at 3: CrashLoopBackOff
        waiting = read(api, "rank-0").status.container_statuses[0]
        assert waiting.state.waiting.reason == "CrashLoopBackOff"
        # in back-off, both the current and the previous log are the instance that exited
        assert log(api, "rank-0").splitlines() == first
        assert log(api, "rank-0", previous=True).splitlines() == first
        step_until(
            emu,
            lambda: read(api, "rank-0").status.container_statuses[0].state.running,
            "the restart",
        )
        assert log(api, "rank-0").splitlines() == ["resumed from step 2"]
        assert log(api, "rank-0", previous=True).splitlines() == first
        assert log(api, "rank-0", previous=True, tail_lines=2).splitlines() == first[-2:]
        assert log(api, "rank-0", previous=True, limit_bytes=8) == "starting"

        stamped = log(api, "rank-0", timestamps=True)
        stamp, text = stamped.rstrip("\n").split(" ", 1)
        assert text == "resumed from step 2"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z", stamp)
        written = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        assert abs((dt.datetime.now(dt.UTC) - written).total_seconds()) < 5

        time.sleep(1.1)  # the lines so far age past sinceSeconds=1
        emu.step(1)  # the second instance fails at step 3 again (it resumed from 2)
        assert log(api, "rank-0", since_seconds=1).splitlines() == [
            "error: simulated failure at step 3/5 (exit code 1)"
        ]
        assert log(api, "rank-0", since_seconds=60).splitlines() == [
            "resumed from step 2",
            "error: simulated failure at step 3/5 (exit code 1)",
        ]


def test_a_container_that_never_ran_answers_400(emu: KubeEmulator, api: client.CoreV1Api) -> None:
    setup_namespace(api)
    with emu.paused():
        api.create_namespaced_pod(NS, trainer_pod("early", train(1, 0.05), claim=None))
        emu.step()
        with pytest.raises(ApiException) as caught:
            log(api, "early")
    assert caught.value.status == 400
    assert error_body(caught.value)["message"] == (
        'container "main" in pod "early" is waiting to start: ContainerCreating'
    )


# --- volumes -----------------------------------------------------------------------------------


def test_empty_dir_is_per_pod_and_goes_with_it(emu: KubeEmulator, api: client.CoreV1Api) -> None:
    setup_namespace(api)
    api.create_namespaced_pod(NS, trainer_pod("one", train(2, 0.05), claim=None))
    first = wait_phase(api, "one", "Succeeded")
    scratch = emu.volume_data.empty_dir(first.metadata.uid, "ckpt")
    assert (scratch / "run" / "step").read_text() == "2\n"

    api.create_namespaced_pod(NS, trainer_pod("two", train(2, 0.05), claim=None, node=NODE_B))
    wait_phase(api, "two", "Succeeded")
    assert log(api, "two").splitlines()[0] == "starting at step 0"

    api.delete_namespaced_pod("one", NS)
    wait_for(lambda: not scratch.exists(), "the emptyDir removed", TIMEOUT_S)


def test_volume_paths_follow_mounts_sub_paths_and_read_only(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    setup_namespace(api, "ckpt")
    pod = trainer_pod("ranks", ["sleep", "infinity"])
    pod["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "ckpt", "mountPath": "/ckpt", "subPath": "job-1"},
        {"name": "ckpt", "mountPath": "/ckpt/shared", "readOnly": True},
    ]
    created = api.create_namespaced_pod(NS, pod)
    wait_for(lambda: read(api, "ranks").status.phase == "Running", "running", TIMEOUT_S)
    stored = emu.api.get_raw(PODS, NS, "ranks")
    container = stored["spec"]["containers"][0]
    root = volume_of(emu, api, "ckpt")

    def resolve(path: str) -> tuple[Path, bool] | None:
        place = emu.volume_data.resolve(stored, container, path)
        return (place.path, place.read_only) if place else None

    assert resolve("/ckpt/run/step") == (root / "job-1" / "run" / "step", False)
    assert resolve("/ckpt/shared/x") == (root / "x", True)
    assert resolve("/ckpt") == (root / "job-1", False)
    assert resolve("/ckpt/../etc/passwd") is None
    assert resolve("/tmp/x") is None
    assert created.metadata.uid == stored["metadata"]["uid"]


def test_exec_shell_reads_the_files_on_a_pods_volumes(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    setup_namespace(api, "ckpt")
    api.create_namespaced_pod(NS, trainer_pod("rank-0", train(2, 0.05)))
    wait_phase(api, "rank-0", "Succeeded")
    api.create_namespaced_pod(NS, trainer_pod("debug", ["sleep", "infinity"]))
    wait_phase(api, "debug", "Running")

    def run(*command: str) -> str:
        # read off the channel: the client's preloaded answer goes through json.loads ("2\n")
        session = stream(
            api.connect_get_namespaced_pod_exec,
            "debug",
            NS,
            command=list(command),
            stdin=False,
            stdout=True,
            stderr=True,
            tty=False,
            _preload_content=False,
        )
        session.run_forever(timeout=TIMEOUT_S)
        return str(session.read_stdout())

    assert run("ls", "/ckpt/run") == "step\n"
    assert run("cat", "/ckpt/run/step") == "2\n"
    assert run("cat", "/ckpt/run/nothing") == "cat: /ckpt/run/nothing: No such file or directory\n"
    assert run("ls", "/public") == "data  models\n"  # off the volumes, as before


def test_a_gated_trainer_starts_only_once_exec_touches_its_gate_file(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    """A multi-node job's rank (clusters.gates): the init waits for STARVERSE_GATE, a file on
    an emptyDir the worker writes through pods/exec once the pre-flight check passed."""
    setup_namespace(api, "ckpt")
    pod = trainer_pod("rank-0", train(2, 0.05), env={"STARVERSE_GATE": "/run/gate/open"})
    spec = pod["spec"]
    spec["volumes"].append({"name": "gate", "emptyDir": {}})
    spec["containers"][0]["volumeMounts"].append({"name": "gate", "mountPath": "/run/gate"})
    api.create_namespaced_pod(NS, pod)
    wait_phase(api, "rank-0", "Running")
    wait_for(lambda: "waiting for /run/gate/open" in log(api, "rank-0"), timeout=TIMEOUT_S)
    time.sleep(0.4)  # longer than the whole run would take: it has not started
    assert "step 1/" not in log(api, "rank-0")
    assert read(api, "rank-0").status.phase == "Running"

    def run(*command: str) -> str:
        session = stream(
            api.connect_get_namespaced_pod_exec,
            "rank-0",
            NS,
            command=list(command),
            stdin=False,
            stdout=True,
            stderr=True,
            tty=False,
            _preload_content=False,
        )
        session.run_forever(timeout=TIMEOUT_S)
        return str(session.read_stdout())

    assert "cannot touch" in run("touch", "/nowhere/open")  # not on a volume: refused
    assert run("touch", "/run/gate/open") == ""
    wait_phase(api, "rank-0", "Succeeded")
    assert "step 2/2" in log(api, "rank-0")


def test_a_read_only_checkpoint_directory_fails_the_trainer(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    setup_namespace(api, "ckpt")
    pod = trainer_pod("ro", train(2, 0.05))
    pod["spec"]["containers"][0]["volumeMounts"][0]["readOnly"] = True
    api.create_namespaced_pod(NS, pod)

    failed = wait_phase(api, "ro", "Failed")

    assert failed.status.container_statuses[0].state.terminated.exit_code == 1
    assert log(api, "ro").splitlines() == [
        "starting at step 0",
        *step_lines(1, 1, 2),
        "error: cannot write /ckpt/run/step: Read-only file system",
    ]


def test_snapshot_restores_and_deleted_claims_carry_their_files(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    setup_namespace(api, "ckpt")
    api.create_namespaced_pod(NS, trainer_pod("rank-0", train(2, 0.05)))
    wait_phase(api, "rank-0", "Succeeded")
    source = volume_of(emu, api, "ckpt")
    snapshots = client.CustomObjectsApi(api.api_client)
    snapshots.create_namespaced_custom_object(
        "snapshot.storage.k8s.io",
        "v1",
        NS,
        "volumesnapshots",
        {
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshot",
            "metadata": {"name": "ckpt-snap"},
            "spec": {"source": {"persistentVolumeClaimName": "ckpt"}},
        },
    )
    wait_for(
        lambda: (
            snapshots.get_namespaced_custom_object(
                "snapshot.storage.k8s.io", "v1", NS, "volumesnapshots", "ckpt-snap"
            ).get("status")
            or {}
        ).get("readyToUse"),
        "the snapshot ready",
        TIMEOUT_S,
    )
    (source / "run" / "step").write_text("99\n")  # after the cut: not in the snapshot
    for name, data_source in (
        (
            "restored",
            {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "ckpt-snap"},
        ),
        ("cloned", {"kind": "PersistentVolumeClaim", "name": "ckpt"}),
    ):
        api.create_namespaced_persistent_volume_claim(
            NS,
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": name},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "10Gi"}},
                    "dataSource": data_source,
                },
            },
        )

    def step_file(claim: str) -> str:
        if api.read_namespaced_persistent_volume_claim(claim, NS).status.phase != "Bound":
            return ""
        target = volume_of(emu, api, claim) / "run" / "step"
        return target.read_text() if target.exists() else ""

    assert wait_for(lambda: step_file("restored"), "the restored claim's files") == "2\n"
    assert wait_for(lambda: step_file("cloned"), "the cloned claim's files") == "99\n"

    api.delete_namespaced_pod("rank-0", NS)
    wait_for(lambda: not api.list_namespaced_pod(NS).items, "the pod gone", TIMEOUT_S)
    api.delete_namespaced_persistent_volume_claim("ckpt", NS)
    wait_for(lambda: not source.exists(), "the deleted claim's volume removed", TIMEOUT_S)


# --- scheduling -------------------------------------------------------------------------------


def test_a_terminal_pod_frees_its_nodes_gpus_for_the_scheduler(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    setup_namespace(api)
    api.create_namespaced_pod(
        NS, trainer_pod("big-a", train(3, 0.3), claim=None, node=NODE_A100, gpus=8)
    )
    wait_for(lambda: read(api, "big-a").status.phase == "Running", "running", TIMEOUT_S)
    waiting = trainer_pod("big-b", ["sleep", "infinity"], claim=None, node=None, gpus=8)
    waiting["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE_A100}
    api.create_namespaced_pod(NS, waiting)
    unschedulable = wait_for(
        lambda: next(
            (c for c in read(api, "big-b").status.conditions or [] if c.type == "PodScheduled"),
            None,
        ),
        "a scheduling attempt",
        TIMEOUT_S,
    )
    assert (unschedulable.status, unschedulable.reason) == ("False", "Unschedulable")

    wait_phase(api, "big-a", "Succeeded")
    running = wait_phase(api, "big-b", "Running")

    assert running.spec.node_name == NODE_A100


# --- the command line --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("container", "expected"),
    [
        ({"command": train(3, 0.5)}, TrainerArgs(3, 0.5)),
        (
            {
                "command": ["/opt/bin/starverse-sim-train"],
                "args": ["--steps=10", "--step-seconds", "1", "--fail-at", "4", "--exit-code=3"],
            },
            TrainerArgs(10, 1.0, 4, 3),
        ),
        (
            {
                "command": ["sh", "-lc"],
                "args": [
                    "set -e; starverse-sim-train --steps 2 --step-seconds 0.1 --checkpoint-dir $CK; echo x"
                ],
                "env": [{"name": "CK", "value": "/nas/ck"}],
            },
            TrainerArgs(2, 0.1, checkpoint_dir="/nas/ck"),
        ),
        (
            {
                "command": ["bash", "-c", "starverse-sim-train --steps 1 --step-seconds 1"],
                "env": [{"name": "STARVERSE_CHECKPOINT_DIR", "value": "/ckpt"}],
            },
            TrainerArgs(1, 1.0, checkpoint_dir="/ckpt"),
        ),
        ({"command": ["/usr/sbin/sshd", "-D"]}, None),
        ({"command": ["python", "train.py"]}, None),
        (
            {"command": ["starverse-sim-train", "--steps", "3"]},
            BadArgs(
                "starverse-sim-train: error: the following arguments are required: --steps, "
                "--step-seconds"
            ),
        ),
    ],
)
def test_trainer_command_lines(container: dict[str, Any], expected: object) -> None:
    assert trainer_args(container) == expected


def test_a_refused_command_line_exits_2_with_its_usage_error(
    emu: KubeEmulator, api: client.CoreV1Api
) -> None:
    setup_namespace(api)
    api.create_namespaced_pod(
        NS, trainer_pod("typo", ["starverse-sim-train", "--stpes", "3"], claim=None)
    )
    failed = wait_phase(api, "typo", "Failed")
    assert failed.status.container_statuses[0].state.terminated.exit_code == 2
    assert log(api, "typo") == "starverse-sim-train: error: unrecognized arguments: --stpes\n"
