"""The endpoint pages in the console's card layout, in both languages, at 1280 px: the empty
list says what an endpoint is and leads to "Serve a model"; the form picks its source from the
account's disks, NAS and the public pool's models, shows only the chosen engine's options, each
named and explained in the reader's language, and starts at zero replicas with the cold start
said; an endpoint's page copies its curl sample, says where the key comes from and asks before
it deletes. Screenshots: var/screenshots/endpoint-<page>-<lang>.png."""

from pathlib import Path

from playwright.sync_api import Dialog, Page, expect

from endpoints.models import Endpoint
from tests.e2e.steps import fits, log_in, t
from tests.factories import fund, make_disk, make_endpoint, make_public_model, make_user

SHOTS = Path(__file__).resolve().parents[2] / "var" / "screenshots"


def _shot(page: Page, name: str, lang: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"endpoint-{name}-{lang}.png"), full_page=True)


def test_the_empty_list_says_what_an_endpoint_is(page: Page, lang, live_server, catalog):
    user = make_user()
    log_in(page, live_server.url, user.email)

    page.goto(f"{live_server.url}/console/endpoints/")

    empty = page.locator("#endpoints-empty")
    expect(empty.locator(".empty-title")).to_have_text(t(lang, "No endpoints yet"))
    expect(empty.locator("p.muted")).to_have_text(
        t(
            lang,
            "An endpoint serves a model (from a cloud disk, the shared NAS or the public pool) "
            "at an HTTPS URL that answers OpenAI's chat and completions API. It starts replicas "
            "on GPUs as requests come, scales to zero when idle and is billed per replica-minute "
            "while ready.",
        )
    )
    link = empty.get_by_role("link", name=t(lang, "Serve a model"))
    expect(link).to_have_attribute("href", "/console/endpoints/new/")
    fits(page)
    _shot(page, "list-empty", lang)


def test_serve_a_model_picks_its_source_and_shows_the_chosen_engines_options(
    page: Page, lang, live_server, catalog
):
    from storage.provisioning import disk_ensure

    user = make_user()
    fund(user, 100_000)
    disk = make_disk(user, name="sft-run", size_gb=200)
    disk_ensure(disk.id)
    model = make_public_model()
    log_in(page, live_server.url, user.email)

    page.goto(f"{live_server.url}/console/endpoints/new/")

    disks = page.locator('fieldset[data-source-kind="disk"]')
    expect(disks.locator("legend")).to_have_text(t(lang, "Cloud disk"))
    expect(disks.locator(".choice")).to_have_text(f"sft-run200 GB · {disk.id}")
    models = page.locator('fieldset[data-source-kind="dataset"]')
    expect(models.locator("legend")).to_have_text(t(lang, "Public pool model"))
    expect(models.locator(".choice")).to_have_text("qwen2-7b-instruct16.1 GB · qwen2-7b-instruct")
    vllm = page.locator('[data-engine-options="vllm"]')
    trt = page.locator('[data-engine-options="tensorrt-llm"]')
    expect(vllm).to_be_visible()
    expect(trt).to_be_hidden()
    expect(vllm.locator(".field-label label")).to_have_text(
        [
            t(lang, "Quantization"),
            t(lang, "Context length"),
            t(lang, "GPU memory share"),
            t(lang, "Data type"),
            t(lang, "Tensor parallel GPUs"),
        ]
    )
    expect(vllm.locator("#opt-vllm-dtype-help")).to_have_text(
        t(lang, "The activations' number type; auto: the model's own.")
    )
    expect(page.locator("#endpoint-min")).to_have_value("0")
    cold = page.locator("#cold-start li:visible")
    expect(cold).to_have_text(
        t(
            lang,
            "%(engine)s: about %(s)s s to pull its image onto a node that does not hold it yet, "
            "then the time the weights take to load.",
            engine="vLLM",
            s=15,  # the 12 GB vLLM image at 800 MB/s
        )
    )
    fits(page)
    _shot(page, "new", lang)

    page.locator("input[data-engine-pick][value=tensorrt-llm]").check()
    expect(trt).to_be_visible()
    expect(vllm).to_be_hidden()
    expect(cold).to_have_text(
        t(
            lang,
            "%(engine)s: about %(s)s s to pull its image onto a node that does not hold it yet, "
            "then the time the weights take to load.",
            engine="TensorRT-LLM",
            s=30,  # 24 GB
        )
    )
    page.locator("input[data-engine-pick][value=vllm]").check()
    page.locator(f'input[name=source][value="dataset:{model.pk}"]').check()
    page.fill("#opt-vllm-max_model_len", "4096")
    page.fill("#endpoint-name", "qwen")
    with page.expect_navigation():
        page.click("#endpoint-form button[type=submit]")

    endpoint = Endpoint.objects.get()
    assert page.url == f"{live_server.url}/console/endpoints/{endpoint.id}/"
    assert (endpoint.source_kind, endpoint.source_dataset) == ("dataset", model.pk)
    assert endpoint.engine_options == {"max_model_len": 4096, "tensor_parallel_size": 1}
    assert (endpoint.min_replicas, endpoint.max_replicas) == (0, 1)


def test_the_endpoint_page_copies_its_curl_and_asks_before_it_deletes(
    page: Page, lang, live_server, catalog
):
    user = make_user()
    endpoint = make_endpoint(user)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    log_in(page, live_server.url, user.email)

    page.goto(f"{live_server.url}/console/endpoints/")
    expect(page.locator("tbody tr")).to_have_count(1)
    fits(page)
    _shot(page, "list", lang)

    page.goto(f"{live_server.url}/console/endpoints/{endpoint.id}/")
    call = page.locator("#call")
    expect(call.locator(".connect-lead")).to_have_text(
        t(
            lang,
            "Set KEY to one of this endpoint's API keys: create one under API keys below. A key "
            "is shown once, when it is created; keep it then.",
        )
    )
    call.locator("button[data-copy]").click()
    expect(call.locator("button[data-copy] span")).to_have_text(t(lang, "Copied"))
    sample = page.locator("#curl-sample").text_content() or ""
    assert page.evaluate("navigator.clipboard.readText()") == sample.strip()
    assert sample.startswith(f"curl http://ep-{endpoint.id[3:].lower()}.localhost:8002/v1/chat/")

    page.fill("#key-name", "laptop")
    with page.expect_navigation():
        page.click("#keys button[type=submit]")
    expect(page.locator("#new-key-value")).to_have_text(
        page.locator("#new-key-value").text_content() or "sk-sv-"
    )
    assert (page.locator("#new-key-value").text_content() or "").startswith("sk-sv-")
    fits(page)
    _shot(page, "detail", lang)

    asked: list[str] = []

    def dismiss(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    page.click("#delete button[type=submit]")
    assert asked == [
        t(
            lang,
            "Delete the endpoint “%(name)s”? Its URL stops answering and its keys stop working. "
            "This cannot be undone.",
            name="qwen",
        )
    ]
    endpoint.refresh_from_db()
    assert endpoint.status == "provisioning"  # refused: nothing changed
