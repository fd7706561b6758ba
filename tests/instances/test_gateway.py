"""The HTTPS gateway's rules on the console side: which ports an instance declares (API, order,
console), and the proxy's authorization check with its log-in hop and share links. The proxy
is played by a test client calling /gateway/auth the way Traefik or Envoy call it; the routes
on the cluster and the real proxy are in test_gateway_routes.py and
tests/devstack/test_gateway.py."""

import re
from urllib.parse import parse_qs, quote, urlsplit

import pytest
from django.test import Client

from instances.gateway import instance_ports_set, share_create
from instances.models import Instance, InstanceEvent, PortShare
from tests.factories import fund, make_instance, make_user

COOKIE = "starverse-gw"  # the development gateway's (GATEWAY_SCHEME http) cookie name


def _page(response) -> bytes:
    """A page's bytes less its CSRF token, which is masked afresh for every response (the
    console's 404 carries the language switcher's form)."""
    return re.sub(rb'name="csrfmiddlewaretoken" value="[^"]+"', b"", response.content)


def _host(instance, port):
    return f"{instance.id.lower().replace('_', '-')}-{port}.localhost:8002"


def _check(host, uri="/", cookie=None, method="GET"):
    """The proxy's authorization check, as Traefik's ForwardAuth asks it."""
    extra = {
        "HTTP_X_FORWARDED_HOST": host,
        "HTTP_X_FORWARDED_URI": uri,
        "HTTP_X_FORWARDED_METHOD": method,
        "HTTP_X_FORWARDED_PROTO": "http",
    }
    if cookie:
        extra["HTTP_COOKIE"] = f"{COOKIE}={cookie}"
    return Client().get("/gateway/auth", **extra)


def _sign_in(console, host, path="/"):
    """The browser's hop through the console: the address's cookie for the signed-in user."""
    hop = console.get("/gateway/login", {"next": f"http://{host}{path}"})
    assert hop.status_code == 302, hop.content
    target = urlsplit(hop["Location"])
    assert (target.scheme, target.netloc, target.path) == ("http", host, "/__starverse/auth")
    done = _check(host, f"{target.path}?{target.query}")
    assert done.status_code == 302 and done["Location"] == path
    cookie = done.cookies[COOKIE]
    assert cookie["httponly"] and cookie["path"] == "/" and not cookie["domain"]
    return cookie.value


@pytest.fixture
def owner(catalog):
    user = make_user()
    fund(user, 100_000)
    return user


@pytest.fixture
def running(owner):
    instance = make_instance(owner, status="running")
    return Instance.objects.get(pk=instance_ports_set(instance_id=instance.id, ports=[6006]).pk)


@pytest.fixture
def console(owner):
    client = Client()
    client.force_login(owner)
    return client


# --- declared ports -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ports", "code", "named"),
    [
        ([0], "invalid_port", "Port 0 is outside 1–65535."),
        ([6006, 65536], "invalid_port", "Port 65536 is outside 1–65535."),
        ([22], "reserved_port", "Port 22 is reserved for SSH"),
        ([8888], "reserved_port", "Port 8888 is Jupyter's"),
        ([6006, 7860, 6006], "duplicate_port", "Port 6006 is listed twice."),
        (list(range(7000, 7009)), "too_many_ports", "port 7008 is one too many"),
    ],
)
def test_a_refused_port_is_a_400_naming_it_and_changes_nothing(db, client_for, ports, code, named):
    user = make_user()
    instance = make_instance(user)
    instance_ports_set(instance_id=instance.id, ports=[9000])

    answer = client_for(user).put(
        f"/api/v1/instances/{instance.id}/ports", {"ports": ports}, format="json"
    )

    assert answer.status_code == 400
    assert answer.json()["code"] == code
    assert named in answer.json()["detail"]
    assert Instance.objects.get(pk=instance.pk).ports == [9000]


def test_put_ports_answers_each_port_with_its_address(db, client_for):
    user = make_user()
    instance = make_instance(user)
    label = instance.id.lower().replace("_", "-")

    answer = client_for(user).put(
        f"/api/v1/instances/{instance.id}/ports", {"ports": [7860, 6006]}, format="json"
    )

    assert answer.status_code == 200
    assert answer.json() == {
        "ports": [
            {"port": 6006, "url": f"http://{label}-6006.localhost:8002/"},
            {"port": 7860, "url": f"http://{label}-7860.localhost:8002/"},
        ]
    }
    shown = client_for(user).get(f"/api/v1/instances/{instance.id}").json()
    assert shown["ports"] == answer.json()["ports"]
    listed = client_for(user).get("/api/v1/instances").json()["results"][0]
    assert listed["ports"] == answer.json()["ports"]
    assert InstanceEvent.objects.filter(
        instance=instance, message="HTTP ports through the gateway: %(ports)s."
    ).get().params == {"ports": "6006, 7860"}


def test_another_tenants_ports_are_a_404_and_stay_as_they_were(db, client_for):
    instance = make_instance(make_user())
    instance_ports_set(instance_id=instance.id, ports=[6006])

    answer = client_for(make_user()).put(
        f"/api/v1/instances/{instance.id}/ports", {"ports": [7860]}, format="json"
    )

    assert (answer.status_code, answer.json()["code"]) == (404, "not_found")
    assert Instance.objects.get(pk=instance.pk).ports == [6006]


def test_ports_are_declared_at_order_time_and_checked_there(catalog, client_for):
    user = make_user()
    fund(user, 100_000)
    client = client_for(user)
    order = {"offering": catalog["h100x1"].id, "image": "pytorch-2.1"}

    refused = client.post("/api/v1/instances", {**order, "ports": [22]}, format="json")
    ordered = client.post("/api/v1/instances", {**order, "ports": [8000, 6006]}, format="json")

    assert (refused.status_code, refused.json()["code"]) == (400, "reserved_port")
    assert Instance.objects.filter(tenant_id=user.tenant_id).count() == 1
    assert ordered.status_code == 202
    assert [p["port"] for p in ordered.json()["ports"]] == [6006, 8000]
    assert Instance.objects.get(pk=ordered.json()["id"]).ports == [6006, 8000]


# --- the authorization check ----------------------------------------------------------------


def test_without_a_cookie_every_address_goes_to_the_console_login_alike(running, settings):
    mine = _host(running, 6006)
    nobody = "ins-" + "a" * 20 + "-6006.localhost:8002"

    answers = [_check(host, "/scalars?run=1") for host in (mine, nobody)]

    for host, answer in zip((mine, nobody), answers, strict=True):
        assert answer.status_code == 302
        back = quote(f"http://{host}/scalars?run=1")
        assert answer["Location"] == f"http://127.0.0.1:8000/gateway/login?next={back}"
    assert _check(mine, "/upload", method="POST").status_code == 401  # no redirect for a POST
    assert _check("console.example.com").status_code == 404  # not a gateway address


def test_the_owner_passes_after_the_login_hop_and_jupyter_gets_its_token(running, console):
    cookie = _sign_in(console, _host(running, 8888), "/lab?reset")

    jupyter = _check(_host(running, 8888), "/lab", cookie)
    assert jupyter.status_code == 200
    assert jupyter["Authorization"] == f"token {running.jupyter_token}"  # to the pod only

    # a cookie is good for its own address only: the next port asks again
    assert _check(_host(running, 6006), "/", cookie).status_code == 302
    tensorboard = _check(_host(running, 6006), "/", _sign_in(console, _host(running, 6006)))
    assert tensorboard.status_code == 200 and "Authorization" not in tensorboard


def test_envoy_asks_with_the_original_host_and_the_path_appended(running, console):
    cookie = _sign_in(console, _host(running, 8888))
    envoy = Client()

    answer = envoy.get(
        "/gateway/auth/api/contents?type=notebook",
        HTTP_HOST=_host(running, 8888),
        HTTP_COOKIE=f"{COOKIE}={cookie}",
    )
    login = envoy.get("/gateway/auth/lab", HTTP_HOST=_host(running, 8888))

    assert answer.status_code == 200 and answer["Authorization"].startswith("token ")
    assert login.status_code == 302
    assert login["Location"].endswith("next=" + quote(f"http://{_host(running, 8888)}/lab"))


def test_a_login_token_works_once_and_only_for_its_address(running, console):
    hop = console.get("/gateway/login", {"next": f"http://{_host(running, 6006)}/"})
    target = urlsplit(hop["Location"])
    uri = f"{target.path}?{target.query}"

    elsewhere = _check(_host(running, 8888), uri)
    first = _check(_host(running, 6006), uri)
    again = _check(_host(running, 6006), uri)

    assert elsewhere.status_code == 302 and COOKIE not in elsewhere.cookies
    assert first.status_code == 302 and COOKIE in first.cookies
    assert again.status_code == 302 and COOKIE not in again.cookies
    assert again["Location"].startswith("http://127.0.0.1:8000/gateway/login?next=")


def test_another_tenant_gets_404_signed_in_or_with_its_own_cookie(running, catalog):
    stranger = make_user()
    fund(stranger, 100_000)
    theirs = make_instance(stranger, status="running")
    console = Client()
    console.force_login(stranger)

    refused = console.get("/gateway/login", {"next": f"http://{_host(running, 8888)}/"})
    nobody = console.get(
        "/gateway/login", {"next": "http://ins-" + "b" * 20 + "-8888.localhost:8002/"}
    )
    own_cookie = _sign_in(console, _host(theirs, 8888))

    assert refused.status_code == 404 and nobody.status_code == 404
    assert _page(refused) == _page(nobody)  # nothing tells whether it exists
    assert _check(_host(running, 8888), "/", own_cookie).status_code == 302
    offsite = console.get("/gateway/login", {"next": "http://evil.example/"})
    assert offsite.status_code == 404


@pytest.mark.parametrize("next_url", ["http://[::1/", "http://[/lab", "http://ins-x]:8002/"])
def test_a_next_address_that_cannot_be_read_is_the_consoles_404(console, next_url):
    nobody = console.get(
        "/gateway/login", {"next": "http://ins-" + "b" * 20 + "-8888.localhost:8002/"}
    )

    answer = console.get("/gateway/login", {"next": next_url})

    assert answer.status_code == 404
    assert _page(answer) == _page(nobody)


@pytest.mark.parametrize(
    "back",
    [
        "/\t/evil.example",
        "/\n/evil.example",
        "/\r\n/evil.example",
        "/\t\\evil.example",
        "/\x1b/evil.example",
        "/\x7f/evil.example",
        "/lab\x85",
        "//evil.example",
        "/\\evil.example",
        "https://evil.example/",
        "javascript:alert(1)",
        "lab",
    ],
)
def test_the_login_hop_goes_back_only_to_a_path_of_the_same_address(running, console, back):
    """Browsers drop tabs and line breaks from an address: `/<tab>/evil.example` is read as
    `//evil.example`, another host. Control characters, schemes and hosts go back to `/`."""
    host = _host(running, 6006)
    hop = urlsplit(console.get("/gateway/login", {"next": f"http://{host}/"})["Location"])
    token = parse_qs(hop.query)["token"][0]

    done = _check(host, f"{hop.path}?token={quote(token)}&next={quote(back, safe='')}")

    assert done.status_code == 302 and COOKIE in done.cookies
    assert done["Location"] == "/"


def test_the_login_hop_keeps_an_ordinary_path_and_query(running, console):
    host = _host(running, 6006)
    hop = urlsplit(console.get("/gateway/login", {"next": f"http://{host}/"})["Location"])
    token = parse_qs(hop.query)["token"][0]
    back = "/data/run%201/?tab=scalars&smoothing=0.6"

    done = _check(host, f"{hop.path}?token={quote(token)}&next={quote(back, safe='')}")

    assert (done.status_code, done["Location"]) == (302, back)


def test_a_port_not_served_is_a_404_and_a_stopped_instance_a_503(running, console):
    cookie = _sign_in(console, _host(running, 7860))

    assert _check(_host(running, 7860), "/", cookie).status_code == 404
    instance_ports_set(instance_id=running.id, ports=[6006, 7860])
    assert _check(_host(running, 7860), "/", cookie).status_code == 200
    Instance.objects.filter(pk=running.pk).update(status="stopped")
    stopped = _check(_host(running, 7860), "/", cookie)
    assert stopped.status_code == 503 and b"The instance is stopped" in stopped.content


def test_a_share_link_opens_its_port_only_and_stops_when_revoked(running, owner, client_for):
    api = client_for(owner)
    made = api.post(f"/api/v1/instances/{running.id}/shares", {"port": 6006}, format="json")
    assert made.status_code == 201
    link = urlsplit(made.json()["url"])
    assert link.netloc == _host(running, 6006) and link.path == "/__starverse/share"
    assert PortShare.objects.get().token_hash not in made.json()["url"]  # only a hash is kept

    redeemed = _check(link.netloc, f"{link.path}?{link.query}")
    assert redeemed.status_code == 302 and redeemed["Location"] == "/"
    cookie = redeemed.cookies[COOKIE].value
    assert _check(_host(running, 6006), "/", cookie).status_code == 200
    assert _check(_host(running, 8888), "/", cookie).status_code == 302  # not its port

    listed = api.get(f"/api/v1/instances/{running.id}/shares").json()["results"]
    assert [(s["id"], s["port"]) for s in listed] == [(made.json()["id"], 6006)]
    assert "url" not in listed[0]  # the link was shown once
    revoked = api.delete(f"/api/v1/instances/{running.id}/shares/{made.json()['id']}")
    assert revoked.status_code == 204

    assert _check(_host(running, 6006), "/", cookie).status_code == 302  # back to the log-in
    again = _check(link.netloc, f"{link.path}?{link.query}")
    assert again.status_code == 404 and COOKIE not in again.cookies
    assert api.get(f"/api/v1/instances/{running.id}/shares").json()["results"] == []
    gone = api.delete(f"/api/v1/instances/{running.id}/shares/{made.json()['id']}")
    assert (gone.status_code, gone.json()["code"]) == (404, "share_not_found")


def test_removing_a_port_revokes_its_share_links(running, owner):
    share, url = share_create(instance=running, port=6006, user=owner)
    link = urlsplit(url)
    cookie = _check(link.netloc, f"{link.path}?{link.query}").cookies[COOKIE].value

    instance_ports_set(instance_id=running.id, ports=[])
    instance_ports_set(instance_id=running.id, ports=[6006])  # back, but not its old links

    share.refresh_from_db()
    assert share.revoked_at is not None
    assert _check(_host(running, 6006), "/", cookie).status_code == 302


def test_shares_only_for_served_ports_and_another_tenant_gets_404(running, client_for, owner):
    refused = client_for(owner).post(
        f"/api/v1/instances/{running.id}/shares", {"port": 7860}, format="json"
    )
    stranger = client_for(make_user()).post(
        f"/api/v1/instances/{running.id}/shares", {"port": 6006}, format="json"
    )

    assert (refused.status_code, refused.json()["code"]) == (400, "port_not_served")
    assert "Port 7860" in refused.json()["detail"]
    assert (stranger.status_code, stranger.json()["code"]) == (404, "not_found")
    assert not PortShare.objects.exists()


def test_the_jupyter_token_is_in_no_address_answer_or_page(running, owner, console, client_for):
    api = client_for(owner)
    token = running.jupyter_token
    assert token  # made at provisioning
    seen = [
        api.get(f"/api/v1/instances/{running.id}").content,
        api.get("/api/v1/instances").content,
        api.put(f"/api/v1/instances/{running.id}/ports", {"ports": [6006]}, format="json").content,
        api.post(f"/api/v1/instances/{running.id}/shares", {"port": 8888}, format="json").content,
        api.get(f"/api/v1/instances/{running.id}/shares").content,
        console.get(f"/console/instances/{running.id}/").content,
    ]
    hop = console.get("/gateway/login", {"next": f"http://{_host(running, 8888)}/"})
    target = urlsplit(hop["Location"])
    done = _check(_host(running, 8888), f"{target.path}?{target.query}")
    refused = _check(_host(running, 8888), "/")
    seen += [hop["Location"].encode(), str(done.headers).encode(), str(refused.headers).encode()]

    assert not [answer for answer in seen if token.encode() in answer]
    info = api.get(f"/api/v1/instances/{running.id}").json()
    assert info["jupyter_url"] == f"http://{_host(running, 8888)}/"
    assert parse_qs(urlsplit(info["jupyter_url"]).query) == {}


# --- the console ----------------------------------------------------------------------------


def test_the_console_adds_and_removes_ports_and_shows_a_share_link_once(running, console):
    page = f"/console/instances/{running.id}/"

    added = console.post(f"{page}ports/", {"port": "7860"})
    refused = console.post(f"{page}ports/", {"port": "22"}, follow=True)
    assert added.status_code == 302 and added["Location"] == page + "#ports"
    assert "Port 22 is reserved for SSH" in refused.content.decode()
    assert Instance.objects.get(pk=running.pk).ports == [6006, 7860]

    console.post(f"{page}shares/", {"port": "7860"})
    shown = console.get(page).content.decode()
    share = PortShare.objects.get()
    links = re.findall(r"http://[^\s<\"]+/__starverse/share\?token=[\w-]+", shown)
    assert len(links) == 1
    assert links[0].startswith(f"http://{_host(running, 7860)}/__starverse/share?token=")
    assert "/__starverse/share?token=" not in console.get(page).content.decode()  # once

    console.post(f"{page}shares/{share.id}/revoke/")
    console.post(f"{page}ports/7860/remove/")
    share.refresh_from_db()
    assert share.revoked_at is not None
    assert Instance.objects.get(pk=running.pk).ports == [6006]
    html = console.get(page).content.decode()
    assert f"http://{_host(running, 6006)}/" in html and _host(running, 7860) not in html


def test_another_tenants_console_port_forms_are_404(running):
    stranger = Client()
    stranger.force_login(make_user())
    page = f"/console/instances/{running.id}/"

    for path, data in (("ports/", {"port": "7860"}), ("ports/6006/remove/", {})):
        assert stranger.post(page + path, data).status_code == 404
    assert stranger.post(page + "shares/", {"port": "6006"}).status_code == 404
    assert Instance.objects.get(pk=running.pk).ports == [6006]
    assert not PortShare.objects.exists()
