"""End to end over real HTTP: a browser (requests) opens an instance's addresses through the
development gateway, which asks the console (a live server) and routes by the HTTPRoutes the
worker made to the kube emulator's stand-in pages of the pod; Jupyter's stand-in answers only
with the token the gateway adds, which the browser never sees."""

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
import requests
from django.test import Client

from devstack.gateway import DevGateway, routes_table
from devstack.kube import KubeEmulator
from instances.gateway import instance_ports_set
from instances.models import Instance
from tests.factories import fund, make_instance, make_user

COOKIE = "starverse-gw"


@pytest.fixture
def gateway(live_server: Any, cluster: KubeEmulator, settings: Any) -> Iterator[DevGateway]:
    with DevGateway(auth_url=f"{live_server.url}/gateway/auth", kube_url=cluster.url) as running:
        settings.GATEWAY_DOMAIN = f"localhost:{running.port}"
        settings.PUBLIC_BASE_URL = live_server.url
        yield running


class Browser:
    """A browser that reaches `*.localhost` addresses at the gateway (names this machine may
    not resolve) and keeps each address's cookies to itself, as browsers do."""

    def __init__(self, gateway: DevGateway, console_session: str | None = None) -> None:
        self.gateway = gateway
        self.console_session = console_session
        self.jar: dict[str, dict[str, str]] = {}
        self.seen: list[str] = []

    def get(self, url: str) -> requests.Response:
        parts = urlsplit(url)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        if parts.netloc.split(":")[0].endswith(".localhost"):
            answer = requests.get(
                self.gateway.url + path,
                headers={"Host": parts.netloc},
                cookies=self.jar.get(parts.netloc, {}),
                allow_redirects=False,
                timeout=10,
            )
        else:  # the console (each connection closed: the live server's request thread holds a
            # database session while it is open)
            cookies = {"sessionid": self.console_session} if self.console_session else {}
            answer = requests.get(
                url,
                cookies=cookies,
                headers={"Connection": "close"},
                allow_redirects=False,
                timeout=10,
            )
        self.jar.setdefault(parts.netloc, {}).update(answer.cookies.get_dict())
        self.seen += [url, str(answer.headers), answer.text]
        return answer

    def open(self, url: str, hops: int = 5) -> requests.Response:
        """Follow redirects like a browser, resolving a relative Location on its own host."""
        answer = self.get(url)
        while answer.status_code == 302 and hops:
            location = answer.headers["Location"]
            if location.startswith("/"):
                location = f"{urlsplit(url).scheme}://{urlsplit(url).netloc}{location}"
            url, hops = location, hops - 1
            answer = self.get(url)
        return answer


def _signed_in(user: Any) -> str:
    console = Client()
    console.force_login(user)
    return console.cookies["sessionid"].value


def _address(instance: Instance, port: int, gateway: DevGateway) -> str:
    return f"http://{instance.id.lower().replace('_', '-')}-{port}.localhost:{gateway.port}/"


def test_the_owner_reaches_tensorboard_and_jupyter_through_the_gateway(
    gateway, cluster, transactional_db, catalog
):
    owner = make_user()
    fund(owner, 100_000)
    instance = make_instance(owner, status="running")
    instance_ports_set(instance_id=instance.id, ports=[6006])  # the worker routes it at commit
    instance.refresh_from_db()
    pod = f"{instance.k8s_namespace}/{instance.k8s_name}"
    browser = Browser(gateway, _signed_in(owner))

    first = browser.get(_address(instance, 6006, gateway))
    assert first.status_code == 302
    login = f"{gateway_console(gateway)}/gateway/login?next="
    assert first.headers["Location"] == login + quote(_address(instance, 6006, gateway))

    tensorboard = browser.open(_address(instance, 6006, gateway) + "#/scalars")
    assert tensorboard.status_code == 200, tensorboard.text
    assert f"TensorBoard stand-in on port 6006 of pod {pod}" in tensorboard.text

    jupyter = browser.open(_address(instance, 8888, gateway) + "lab")
    assert jupyter.status_code == 200, jupyter.text
    assert f"JupyterLab of pod {pod}, at /lab" in jupyter.text
    # the pod's stand-in wants the token: the gateway added it, the browser never had it
    service = cluster.service_host(instance.k8s_namespace, f"{instance.k8s_name}-p8888", 8888)
    direct = requests.get(cluster.url + "/lab", headers={"Host": service}, timeout=10)
    assert direct.status_code == 403
    assert not [text for text in browser.seen if instance.jupyter_token in text]
    cookies = browser.jar[urlsplit(_address(instance, 8888, gateway)).netloc]
    assert set(cookies) == {COOKIE}  # the address's own cookie, not the console's session


def test_strangers_and_share_links_through_the_gateway(gateway, transactional_db, catalog):
    owner = make_user()
    fund(owner, 100_000)
    instance = make_instance(owner, status="running")
    instance_ports_set(instance_id=instance.id, ports=[7860])
    api = Client()
    api.force_login(owner)
    made = api.post(
        f"/api/v1/instances/{instance.id}/shares", {"port": 7860}, content_type="application/json"
    ).json()

    stranger = Browser(gateway, _signed_in(make_user()))
    refused = stranger.open(_address(instance, 7860, gateway))
    assert refused.status_code == 404  # at the console's log-in hop: not theirs

    guest = Browser(gateway)  # no account at all
    shared = guest.open(made["url"])
    assert shared.status_code == 200 and "Gradio stand-in on port 7860" in shared.text
    assert guest.open(_address(instance, 8888, gateway)).url.startswith(
        gateway_console(gateway) + "/accounts/login/"
    )


def test_the_gateway_asks_once_per_address_and_cookie_for_a_burst(
    gateway, transactional_db, catalog
):
    owner = make_user()
    fund(owner, 100_000)
    instance = make_instance(owner, status="running")
    instance_ports_set(instance_id=instance.id, ports=[6006])
    browser = Browser(gateway, _signed_in(owner))
    assert browser.open(_address(instance, 6006, gateway)).status_code == 200
    asked = gateway.checks

    for _ in range(5):
        assert browser.get(_address(instance, 6006, gateway)).status_code == 200

    assert gateway.checks == asked  # kept for AUTH_CACHE_S: one check for the burst


def gateway_console(gateway: DevGateway) -> str:
    return gateway.auth_url.removesuffix("/gateway/auth")


def test_routes_are_read_by_host_name_to_the_first_backend():
    routes = [
        {
            "metadata": {"name": "inst-a-p6006", "namespace": "sv-t"},
            "spec": {
                "hostnames": ["ins-a-6006.gw.example.com"],
                "rules": [{"backendRefs": [{"name": "inst-a-p6006", "port": 6006}]}],
            },
        },
        {"metadata": {"name": "no-backend", "namespace": "sv-t"}, "spec": {"hostnames": ["x"]}},
    ]

    table = routes_table(routes)

    assert list(table) == ["ins-a-6006.gw.example.com"]
    backend = table["ins-a-6006.gw.example.com"]
    assert (backend.namespace, backend.service, backend.port) == ("sv-t", "inst-a-p6006", 6006)
