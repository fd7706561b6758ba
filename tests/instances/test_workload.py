"""An instance that runs a program to its end (instances.models.Workload, a job's): its pod runs
the program under the init and is never restarted by the kubelet; when the program ends the
instance stops, billed to the program's end, its GPUs given back, and its owner hears how it
ended. A pod that vanished runs the program again with STARVERSE_RESTART_COUNT one higher."""

import time
from typing import Any

from django.utils import timezone

from compute.models import Allocation
from instances.lifecycle import instance_order
from instances.models import Instance, InstanceEvent, Workload
from instances.provisioning import converge
from instances.provisioning.reconcile import reconcile
from instances.signals import workload_ended
from starverse.core import kube
from tests.factories import converge_until, fund, make_user, read_existing

WAIT_S = 20


def _program(catalog, script: str) -> Instance:
    user = make_user()
    fund(user, 100_000)
    instance, _ = instance_order(
        user=user,
        offering_id=catalog["h100x1"].id,
        image_id="pytorch-2.1",
        workload=Workload(
            argv=["bash", "-lc", script],
            env={"STARVERSE_JOB_ID": "job_1", "STARVERSE_CHECKPOINT_DIR": "/root/data/ckpt"},
            labels={"starverse.io/job": "job-1"},
        ),
    )
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    return instance


def _ended(instance: Instance) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while True:
        pod = read_existing("Pod", instance.k8s_namespace, instance.k8s_name)
        if pod["status"].get("phase") in ("Succeeded", "Failed"):
            return pod
        assert time.monotonic() < deadline, pod["status"]
        time.sleep(0.05)


def _env(pod) -> dict[str, str]:
    return {item["name"]: item.get("value", "") for item in pod["spec"]["containers"][0]["env"]}


def test_the_pod_runs_the_program_once_under_the_init(catalog):
    instance = _program(catalog, "starverse-sim-train --steps 2 --step-seconds 0.05")
    pod = read_existing("Pod", instance.k8s_namespace, instance.k8s_name)

    assert pod["spec"]["restartPolicy"] == "Never"
    main = pod["spec"]["containers"][0]
    assert main["command"] == ["/opt/starverse/bin/entrypoint"]  # the platform's init, then it
    assert main["args"] == [
        "--",
        "bash",
        "-lc",
        "starverse-sim-train --steps 2 --step-seconds 0.05",
    ]
    assert main["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert pod["metadata"]["labels"]["starverse.io/job"] == "job-1"
    env = _env(pod)
    assert env["STARVERSE_RESTART_COUNT"] == "0"
    assert env["STARVERSE_JOB_ID"] == "job_1"
    assert env["STARVERSE_INSTANCE_ID"] == instance.id  # the platform's own stay


def test_a_program_that_ends_stops_its_instance_billed_to_its_end(catalog):
    heard = []

    def hear(sender, instance_id, exit_code, **kwargs):
        heard.append((instance_id, exit_code))

    workload_ended.connect(hear)
    try:
        instance = _program(catalog, "starverse-sim-train --steps 2 --step-seconds 0.05")
        pod = _ended(instance)
        assert pod["status"]["phase"] == "Succeeded"
        reconcile()
    finally:
        workload_ended.disconnect(hear)

    instance.refresh_from_db()
    workload = Workload.objects.get(pk=instance.pk)
    assert instance.status == "stopping"
    assert (workload.exit_code, heard) == (0, [(instance.id, 0)])
    assert workload.finished_at is not None and workload.finished_at <= timezone.now()
    assert instance.running_since is None
    # a program of a fraction of a minute is billed one started minute, not until now
    assert instance.cost_fen == -(-catalog["h100x1"].price_per_hour_fen // 60)
    assert InstanceEvent.objects.filter(
        instance=instance, message="Its program finished (exit code 0). Billing stopped."
    ).exists()
    assert converge_until(converge.stop, instance.id) == "stopped"
    assert not Allocation.objects.filter(holding_id=instance.id).exists()
    assert reconcile().recreated == []  # an ended program is not run again by the loop


def test_a_failing_program_reports_its_exit_code_and_last_lines(catalog):
    instance = _program(
        catalog, "starverse-sim-train --steps 5 --step-seconds 0.05 --fail-at 3 --exit-code 4"
    )
    assert _ended(instance)["status"]["phase"] == "Failed"
    reconcile()

    workload = Workload.objects.get(pk=instance.pk)
    assert workload.exit_code == 4
    assert "step 2/5" in workload.message
    assert InstanceEvent.objects.filter(
        instance=instance,
        message="Its program failed with exit code %(code)s. Billing stopped.",
        params={"code": "4"},
    ).exists()


def test_a_vanished_pod_runs_the_program_again_counting_the_restart(catalog):
    instance = _program(catalog, "sleep infinity")
    kube.delete("Pod", instance.k8s_namespace, instance.k8s_name)
    deadline = time.monotonic() + WAIT_S
    while kube.read("Pod", instance.k8s_namespace, instance.k8s_name) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.02)

    assert reconcile().recreated == [instance.id]
    assert converge_until(converge.provision, instance.id) == "running"
    pod = read_existing("Pod", instance.k8s_namespace, instance.k8s_name)
    assert _env(pod)["STARVERSE_RESTART_COUNT"] == "1"
    assert Workload.objects.get(pk=instance.pk).exit_code is None
