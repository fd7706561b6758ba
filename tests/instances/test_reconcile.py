import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from compute.choices import ImageStatus
from compute.models import Image
from instances.images import image_save
from instances.lifecycle import instance_order
from instances.models import Instance, InstanceEvent, PodWatch
from instances.provisioning import converge, manifests, saving
from instances.provisioning.reconcile import reconcile
from starverse.core import kube
from tests.factories import converge_until, fund, make_user, read_existing


def _running(catalog):
    user = make_user()
    fund(user, 100_000)
    instance, _ = instance_order(
        user=user, offering_id=catalog["h100x1"].id, image_id="pytorch-2.1"
    )
    converge_until(converge.provision, instance.id)
    instance.refresh_from_db()
    return instance


def test_a_vanished_pod_is_recreated_and_billing_pauses(
    catalog, django_capture_on_commit_callbacks
):
    instance = _running(catalog)
    kube.delete("Pod", instance.k8s_namespace, instance.k8s_name)
    deadline = time.monotonic() + 5
    while kube.read("Pod", instance.k8s_namespace, instance.k8s_name) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.02)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        report = reconcile()

    instance.refresh_from_db()
    assert report.recreated == [instance.id]
    assert (instance.status, instance.running_since) == ("provisioning", None)
    assert len(callbacks) == 1  # the provisioning task is queued after commit
    assert converge_until(converge.provision, instance.id) == "running"
    instance.refresh_from_db()
    assert instance.session == 2
    assert reconcile().recreated == []


def test_orphans_are_garbage_collected_and_live_objects_kept(catalog):
    instance = _running(catalog)
    namespace = instance.k8s_namespace
    orphan = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "inst-orphan",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "starverse"},
        },
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    kube.ensure(orphan)
    kube.ensure(
        {
            **manifests.disk_claim(instance),
            "metadata": {
                "name": "disk-gone",
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": "starverse"},
            },
        }
    )

    # an image being saved from the instance: its build pod is the saving's (follow_saving_images)
    image = image_save(user=instance.created_by, instance=instance, name="my-env").image
    kube.ensure(saving.build_pod(image, instance))
    # and one left behind by an image that saves no more (its saving lost, the image failed)
    left = image_save(user=instance.created_by, instance=instance, name="gone").image
    kube.ensure(saving.build_pod(left, instance))
    Image.objects.filter(pk=left.pk).update(status=ImageStatus.FAILED)

    report = reconcile()

    assert sorted(report.orphans) == [
        f"persistentvolumeclaim/{namespace}/disk-gone",
        f"pod/{namespace}/inst-orphan",
        f"pod/{namespace}/{saving.build_pod_name(left.id)}",
    ]
    assert kube.read("Pod", namespace, instance.k8s_name) is not None
    assert kube.read("Pod", namespace, saving.build_pod_name(image.id)) is not None
    assert kube.read("PersistentVolumeClaim", namespace, manifests.disk_name(instance.id))


def test_lost_tasks_are_handed_out_again(catalog, django_capture_on_commit_callbacks):
    user = make_user()
    fund(user, 100_000)
    instance, _ = instance_order(
        user=user, offering_id=catalog["h100x1"].id, image_id="pytorch-2.1"
    )
    InstanceEvent.objects.filter(instance=instance).update(at=timezone.now() - timedelta(minutes=5))

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        report = reconcile()

    assert report.requeued == [instance.id]
    assert len(callbacks) == 1
    assert Instance.objects.get(pk=instance.pk).status == "provisioning"


@pytest.mark.parametrize(
    ("stuck_after_s", "quiet_s", "handed_out"), [(60, 30, False), (10, 30, True)]
)
def test_lost_work_waits_for_the_configured_patience(
    catalog, settings, django_capture_on_commit_callbacks, stuck_after_s, quiet_s, handed_out
):
    """RECONCILE_STUCK_AFTER_S: how long without a sign of life before work is handed out again
    (60 s by default; the short chaos drill runs with 10)."""
    settings.RECONCILE_STUCK_AFTER_S = stuck_after_s
    user = make_user()
    fund(user, 100_000)
    instance, _ = instance_order(
        user=user, offering_id=catalog["h100x1"].id, image_id="pytorch-2.1"
    )
    quiet = timezone.now() - timedelta(seconds=quiet_s)
    InstanceEvent.objects.filter(instance=instance).update(at=quiet)

    with django_capture_on_commit_callbacks(execute=False):
        report = reconcile()

    assert report.requeued == ([instance.id] if handed_out else [])


def test_warnings_about_a_running_pod_join_its_timeline_once(catalog, cluster):
    from kubernetes import client

    instance = _running(catalog)
    pod = read_existing("Pod", instance.k8s_namespace, instance.k8s_name)
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{instance.k8s_name}.oom", "namespace": instance.k8s_namespace},
        "involvedObject": {
            "kind": "Pod",
            "namespace": instance.k8s_namespace,
            "name": instance.k8s_name,
            "uid": pod["metadata"]["uid"],
        },
        "reason": "OOMKilling",
        "message": "Memory cgroup out of memory: Killed process 4242 (python)",
        "type": "Warning",
        "source": {"component": "kubelet"},
    }
    client.CoreV1Api(kube._api_client(settings.KUBECONFIG)).create_namespaced_event(
        instance.k8s_namespace, event
    )

    first, second = reconcile(), reconcile()

    texts = [e.text for e in InstanceEvent.objects.filter(instance=instance)]
    assert (
        texts.count(
            "Kubernetes: OOMKilling: Memory cgroup out of memory: Killed process 4242 (python)"
        )
        == 1
    )
    assert (first.events, second.events) == (1, 0)


def test_a_pending_instance_that_is_being_watched_is_not_handed_out_again(
    catalog, cluster, django_capture_on_commit_callbacks
):
    user = make_user()
    fund(user, 100_000)
    cluster.set_pull_delay(3600)
    instance, _ = instance_order(
        user=user, offering_id=catalog["h100x1"].id, image_id="pytorch-2.1"
    )
    with pytest.raises(converge.StillPending):
        converge.provision(instance.id)  # a task watches the pod
    InstanceEvent.objects.filter(instance=instance).update(at=timezone.now() - timedelta(minutes=5))

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        watched = reconcile()
    PodWatch.objects.filter(instance=instance).update(
        events_read_at=timezone.now() - timedelta(minutes=5)  # that task is gone
    )
    with django_capture_on_commit_callbacks(execute=False) as more:
        lost = reconcile()

    assert (watched.requeued, len(callbacks)) == ([], 0)
    assert (lost.requeued, len(more)) == ([instance.id], 1)
