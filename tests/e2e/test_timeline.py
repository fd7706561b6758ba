"""An instance's timeline in the browser, in Chinese and in English: Kubernetes events of known
reasons read as sentences in the reader's language, with sizes and times in human units, and
what the cluster said one click away (issue 26)."""

from playwright.sync_api import Page, expect

from instances.provisioning.converge import events_record
from starverse.core import kube
from tests.e2e.steps import log_in
from tests.factories import make_instance, make_user

PULLED = (
    'Successfully pulled image "pytorch:2.4" in 2m5.1s (2m5.1s including waiting). '
    "Image size: 18000000000 bytes."
)
SENTENCES = {
    "en": [
        "Pulled the image pytorch:2.4 (18.0 GB) in 2 min 5 s.",
        "The container main keeps failing; it is restarted after a growing pause.",
    ],
    "zh-hans": [
        "已拉取镜像 pytorch:2.4（18.0 GB），用时 2 分 5 秒。",
        "容器 main 反复失败，每次重启前等待的时间逐渐加长。",
    ],
}
RAW = {"en": "Kubernetes: ", "zh-hans": "Kubernetes："}
UNKNOWN = "Rebooted: Node gpu-h100-1 has been rebooted"


def _kubelet_event(instance, n: int, reason: str, message: str) -> dict:
    pod = kube.read("Pod", instance.k8s_namespace, instance.k8s_name)
    assert pod is not None
    return {
        "metadata": {"uid": f"e2e-{n}", "name": f"{instance.k8s_name}.{n}"},
        "involvedObject": {"kind": "Pod", "uid": pod["metadata"]["uid"]},
        "reason": reason,
        "message": message,
        "lastTimestamp": f"2030-01-01T00:00:0{n}Z",
    }


def test_kubernetes_events_read_as_sentences_with_the_raw_event_a_click_away(
    page: Page, lang, live_server, transactional_db, catalog, cluster
):
    user = make_user()
    instance = make_instance(user, status="running")
    events_record(
        instance,
        [
            _kubelet_event(instance, 1, "Pulled", PULLED),
            _kubelet_event(
                instance, 2, "BackOff", "Back-off restarting failed container main in pod x"
            ),
            _kubelet_event(instance, 3, "Rebooted", UNKNOWN.partition(": ")[2]),
        ],
    )
    log_in(page, live_server.url, user.email)
    page.goto(f"{live_server.url}/console/instances/{instance.id}/")

    items = page.locator("#timeline .tl-item")
    told = [items.nth(i) for i in range(items.count() - 3, items.count())]
    expect(told[0].locator("p")).to_have_text(SENTENCES[lang][0])
    expect(told[1].locator("p")).to_have_text(SENTENCES[lang][1])
    # a reason not known shows as the cluster said it, with nothing behind a click
    expect(told[2].locator("p")).to_have_text(RAW[lang] + UNKNOWN)
    expect(told[2].locator("details")).to_have_count(0)

    raw = told[0].locator("details.tl-raw code")
    expect(raw).to_be_hidden()
    told[0].locator("details.tl-raw summary").click()
    expect(raw).to_have_text(f"{RAW[lang]}Pulled: {PULLED}")
    # the emulator's own events of the start are sentences too
    expect(page.locator("#timeline p", has_text="main")).to_contain_text(
        [{"en": "Started the container main.", "zh-hans": "已启动容器 main。"}[lang]]
    )
