"""Kubernetes events on the timeline told as sentences in the reader's language, read out of
kubelet's real message shapes (issue 26)."""

from decimal import Decimal

import pytest
from django.utils import translation

from instances.models import InstanceEvent
from instances.timeline import go_duration_s, human_duration
from starverse.core.text import later

PULLED = (
    'Pulled: Successfully pulled image "pytorch:2.4" in 2m5.1s (2m5.1s including waiting). '
    "Image size: 18000000000 bytes."
)


def _event(raw: str) -> InstanceEvent:
    return InstanceEvent(
        status="provisioning", message=later("Kubernetes: %(event)s") % {"event": raw}
    )


def _told(raw: str, lang: str = "en") -> str:
    with translation.override(lang):
        return _event(raw).told


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2m5.1s", Decimal("125.1")),
        ("850ms", Decimal("0.850")),
        ("1h0m2s", Decimal(3602)),
        ("20ms", Decimal("0.020")),
        ("1.5s", Decimal("1.5")),
        ("500µs", Decimal("0.000500")),
        ("2m5.1", None),
        ("soon", None),
    ],
)
def test_go_durations_as_kubelet_prints_them(text, seconds):
    assert go_duration_s(text) == seconds


@pytest.mark.parametrize(
    ("seconds", "en", "zh"),
    [
        (Decimal("125.1"), "2 min 5 s", "2 分 5 秒"),
        (Decimal("0.85"), "850 ms", "850 毫秒"),
        (Decimal("1.54"), "1.5 s", "1.5 秒"),
        (Decimal("42.4"), "42 s", "42 秒"),
        (Decimal(120), "2 min", "2 分"),
        (Decimal(3602), "1 h", "1 小时"),
        (Decimal(3900), "1 h 5 min", "1 小时 5 分"),
    ],
)
def test_durations_in_human_units_in_both_languages(seconds, en, zh):
    with translation.override("en"):
        assert human_duration(seconds) == en
    with translation.override("zh-hans"):
        assert human_duration(seconds) == zh


@pytest.mark.parametrize(
    ("raw", "en", "zh"),
    [
        (
            PULLED,
            "Pulled the image pytorch:2.4 (18.0 GB) in 2 min 5 s.",
            "已拉取镜像 pytorch:2.4（18.0 GB），用时 2 分 5 秒。",
        ),
        (
            'Pulled: Successfully pulled image "nginx:1" in 850ms (1.2s including waiting).',
            "Pulled the image nginx:1 in 850 ms.",
            "已拉取镜像 nginx:1，用时 850 毫秒。",
        ),
        (
            'Pulled: Container image "pytorch:2.4" already present on machine',
            "The image pytorch:2.4 was already on the node.",
            "镜像 pytorch:2.4 已在节点上。",
        ),
        (
            'Pulling: Pulling image "pytorch:2.4"',
            "Pulling the image pytorch:2.4.",
            "正在拉取镜像 pytorch:2.4。",
        ),
        (
            "Scheduled: Successfully assigned sv-tnt-a/inst-b to gpu-h100-1",
            "Assigned to the node gpu-h100-1.",
            "已分配到节点 gpu-h100-1。",
        ),
        (
            "FailedScheduling: 0/6 nodes are available: 6 Insufficient nvidia.com/gpu. "
            "preemption: 0/6 nodes are available: 6 No preemption victims found for incoming "
            "pod.",
            "Waiting for room: 0 of 6 nodes can take it (6 without enough free GPUs).",
            "正在等待资源：6 个节点中有 0 个可以容纳它（6 个节点空闲 GPU 不足）。",
        ),
        (
            "FailedScheduling: 0/3 nodes are available: 1 node(s) had untolerated taint.",
            "Waiting for room: 0 of 3 nodes can take it.",
            "正在等待资源：3 个节点中有 0 个可以容纳它。",
        ),
        ("Created: Created container: main", "Created the container main.", "已创建容器 main。"),
        ("Created: Created container main", "Created the container main.", "已创建容器 main。"),
        ("Started: Started container main", "Started the container main.", "已启动容器 main。"),
        ("Killing: Stopping container main", "Stopping the container main.", "正在停止容器 main。"),
        (
            "BackOff: Back-off restarting failed container main in pod inst-b_sv-tnt-a(0f7c-uid)",
            "The container main keeps failing; it is restarted after a growing pause.",
            "容器 main 反复失败，每次重启前等待的时间逐渐加长。",
        ),
        (
            'BackOff: Back-off pulling image "pytorch:9"',
            "The image pytorch:9 could not be pulled; trying again after a pause.",
            "无法拉取镜像 pytorch:9，稍后重试。",
        ),
        (
            'Failed: Failed to pull image "pytorch:9": rpc error: code = NotFound',
            "The image pytorch:9 could not be pulled.",
            "无法拉取镜像 pytorch:9。",
        ),
        (
            'FailedMount: MountVolume.SetUp failed for volume "data" : not found',
            "The volume data could not be mounted yet; trying again.",
            "卷 data 暂时无法挂载，正在重试。",
        ),
        (
            "Evicted: The node was low on resource: memory. Threshold quantity: 100Mi.",
            "Evicted: its node ran low on memory.",
            "已被驱逐：所在节点的内存不足。",
        ),
        (
            "OOMKilled: Memory cgroup out of memory: Killed process 4242 (python)",
            "Out of memory: the process python (4242) was killed.",
            "内存不足：进程 python（4242）已被终止。",
        ),
        (
            "Preempting: Preempting container main",
            "Stopped to make room for work of a higher priority.",
            "为更高优先级的任务让出资源而停止。",
        ),
        (
            "Unhealthy: Readiness probe failed: connection refused",
            "The readiness check failed.",
            "就绪检查失败。",
        ),
        ("NodeNotReady: Node is not ready", "Its node is not ready.", "所在节点未就绪。"),
        (
            "Image size: 18000000000 bytes.",
            "The image is 18.0 GB.",
            "镜像大小为 18.0 GB。",
        ),
    ],
)
def test_known_reasons_are_sentences_in_the_readers_language(raw, en, zh):
    assert (_told(raw), _told(raw, "zh-hans")) == (en, zh)


def test_an_event_stored_in_english_reads_in_chinese_and_keeps_the_raw_one():
    with translation.override("en"):
        event = _event(PULLED)
    assert (event.message, event.params) == ("Kubernetes: %(event)s", {"event": PULLED})
    with translation.override("zh-hans"):
        assert event.told == "已拉取镜像 pytorch:2.4（18.0 GB），用时 2 分 5 秒。"
        assert event.text == f"Kubernetes：{PULLED}"


@pytest.mark.parametrize(
    "raw",
    [
        "Rebooted: Node gpu-h100-1 has been rebooted",  # a reason not known: as now
        'Pulled: Pulled image "x" somehow',  # a known reason in a shape not understood
    ],
)
def test_what_is_not_understood_shows_as_stored(raw):
    assert _event(raw).sentence is None
    assert _told(raw) == f"Kubernetes: {raw}"


def test_steps_of_our_own_are_not_kubernetes_events():
    event = InstanceEvent(status="running", message=later("Placed on %(node)s.") % {"node": "n1"})
    assert (event.sentence, event.told) == (None, "Placed on n1.")
