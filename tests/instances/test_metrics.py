"""An instance's GPU charts cover only its current placement: samples its GPUs took before
they were given to it are the previous renter's, and never shown."""

from datetime import timedelta

from django.utils import timezone
from rest_framework.test import APIClient

from compute.models import Allocation
from fleet.models import Gpu, GpuSample
from instances.models import Instance
from tests.factories import make_instance, make_token, make_user


def test_charts_start_when_the_gpus_became_this_instances(cluster, catalog):
    user = make_user()
    instance = make_instance(user, status="running")
    allocation = Allocation.objects.get(holding__instance=instance)
    gpu = Gpu.objects.create(
        node_id=instance.node_id, index=allocation.gpu_index, uuid="GPU-charts", product="x"
    )
    placed = allocation.created_at
    # Its first start was half an hour ago, elsewhere; since a stop and a start it is here.
    Instance.objects.filter(pk=instance.pk).update(started_at=placed - timedelta(minutes=30))
    GpuSample.objects.create(gpu=gpu, at=placed - timedelta(minutes=5), util=97)  # the last renter
    GpuSample.objects.create(gpu=gpu, at=placed + timedelta(seconds=1), util=12)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_token(user)[1]}")

    series = client.get(f"/api/v1/instances/{instance.id}/metrics").json()["results"]

    assert [sample["util"] for sample in series[0]["samples"]] == [12]
    assert placed > timezone.now() - timedelta(hours=1)
