"""The HTTPS gateway in front of instances: which HTTP ports an instance serves besides
Jupyter's, the address of each (`<scheme>://ins-<id>-<port>.<GATEWAY_DOMAIN>/`), share links,
and who may pass.

The proxy (Envoy Gateway in production, devstack/gateway under `make run`) asks the console's
authorization check (instances.api.gateway) before every request; the check only reads the
database. Browsers pass with a cookie of the gateway address itself, never with the console's
session cookie: an address serves the tenant's own programs (Jupyter, Gradio …), whose pages
must not see the console's credentials. The cookie is made by a short hop through the console:
an address without one sends the browser to `/gateway/login`, which, for the instance's owner
signed in to the console, sends it back to the address with a one-minute, one-use token that
the check turns into the address's cookie. A share link's token is turned into a cookie the same
way, and works until it is revoked. Jupyter's token is added by the proxy on the way to the pod
(`Authorization: token …`): it is in no address, page or API answer."""

import hashlib
import logging
import re
import secrets
import unicodedata
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

from django.conf import settings
from django.core import signing
from django.core.cache import cache
from django.db import transaction
from django.db.models.functions import Lower
from django.utils import timezone
from django.utils.html import escape
from django.utils.translation import gettext as _

from instances.choices import InstanceStatus
from instances.models import Instance, InstanceEvent, PortShare
from instances.states import instance_locked
from starverse.accounts.models import User
from starverse.accounts.teams import usable_by
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.errors import Conflict, InvalidInput, NotFound
from starverse.core.links import public_url
from starverse.core.roles import may_use
from starverse.core.text import later

logger = logging.getLogger(__name__)
S = InstanceStatus

SSH_PORT = 22
JUPYTER_PORT = 8888
MAX_PORTS = 8
MAX_SHARES = 20  # live share links per instance
# Where the gateway's own steps live on every address; never passed on to the instance.
OWN_PREFIX = "/__starverse/"
LOGIN_TOKEN_S = 60
_COOKIE_SALT = "starverse.gateway.cookie"
_LOGIN_SALT = "starverse.gateway.login"
_LABEL = re.compile(r"^ins-([a-z0-9]{20})-([0-9]{1,5})$")
ENDED = (S.TERMINATING, S.TERMINATED)


# --- addresses ------------------------------------------------------------------------------


def host_label(instance_id: str, port: int) -> str:
    """The first label of a port's address: the instance id in lower case, and the port."""
    return f"{instance_id.lower().replace('_', '-')}-{port}"


def port_host(instance_id: str, port: int) -> str:
    """A port's host as browsers send it (with GATEWAY_DOMAIN's port, in development)."""
    return f"{host_label(instance_id, port)}.{settings.GATEWAY_DOMAIN}"


def route_hostname(instance_id: str, port: int) -> str:
    """The host name a route matches (Gateway API host names carry no port)."""
    return port_host(instance_id, port).split(":")[0]


def port_url(instance_id: str, port: int) -> str:
    return f"{settings.GATEWAY_SCHEME}://{port_host(instance_id, port)}/"


# These read an Instance or an instance_page row shaped like one (selectors._row): Any.
def served_ports(instance: Any) -> list[int]:
    """Every port the gateway serves for the instance: Jupyter's and the declared ones."""
    return [JUPYTER_PORT, *sorted(instance.ports or [])]


def ports_output(instance: Any) -> list[dict[str, Any]]:
    """The declared ports with their addresses, as the API shows them."""
    return [{"port": port, "url": port_url(instance.id, port)} for port in instance.ports or []]


def jupyter_url(instance: Any) -> str | None:
    """Jupyter's address while the instance runs; no token in it (the proxy adds it)."""
    return port_url(instance.id, JUPYTER_PORT) if instance.status == S.RUNNING else None


def cookie_name() -> str:
    # The __Host- prefix makes browsers keep the cookie to this one host, over https only.
    return "__Host-starverse-gw" if settings.GATEWAY_SCHEME == "https" else "starverse-gw"


def host_parse(host: str) -> tuple[str, int] | None:
    """(lower-cased instance id, port) of a gateway address, or None for any other host."""
    host = host.strip().lower().rstrip(".")
    domain = settings.GATEWAY_DOMAIN
    default_port = ":443" if settings.GATEWAY_SCHEME == "https" else ":80"
    if ":" not in domain and host.endswith(default_port):
        host = host.removesuffix(default_port)
    label, dot, rest = host.partition(".")
    found = _LABEL.match(label) if dot and rest == domain else None
    if found is None:
        return None
    port = int(found.group(2))
    return (f"ins_{found.group(1)}", port) if 1 <= port <= 65535 else None


# --- declared ports -------------------------------------------------------------------------


def ports_validate(ports: list[int]) -> list[int]:
    """The ports a user declares, checked one by one (each refusal names the port): 1–65535,
    not SSH's, not Jupyter's (it always has its address), no repeats, at most MAX_PORTS."""
    seen: list[int] = []
    for port in ports:
        if not 1 <= port <= 65535:
            raise InvalidInput(
                _("Port %(port)s is outside 1–65535.") % {"port": port}, code="invalid_port"
            )
        if port == SSH_PORT:
            raise InvalidInput(
                _("Port %(port)s is reserved for SSH; choose another port.") % {"port": port},
                code="reserved_port",
            )
        if port == JUPYTER_PORT:
            raise InvalidInput(
                _(
                    "Port %(port)s is Jupyter's, which always has its own address "
                    "(jupyter_url); choose another port."
                )
                % {"port": port},
                code="reserved_port",
            )
        if port in seen:
            raise InvalidInput(
                _("Port %(port)s is listed twice.") % {"port": port}, code="duplicate_port"
            )
        if len(seen) == MAX_PORTS:
            raise InvalidInput(
                _("At most %(max)d ports per instance: port %(port)s is one too many.")
                % {"max": MAX_PORTS, "port": port},
                code="too_many_ports",
            )
        seen.append(port)
    return sorted(seen)


def instance_ports_set(*, instance_id: str, ports: list[int]) -> Instance:
    """Declare the instance's HTTP ports. Share links of ports that go stop working (revoked
    now, so adding the port again does not bring them back); the worker brings the instance's
    routes on the cluster in line after commit."""
    wanted = ports_validate(ports)
    with transaction.atomic():
        instance = instance_locked(instance_id)
        if instance.status in ENDED:
            raise Conflict(
                _("This instance is %(state)s; its ports cannot change.")
                % {"state": InstanceStatus(instance.status).label.lower()},
                code="wrong_state",
            )
        if wanted == sorted(instance.ports or []):
            return instance
        gone = set(instance.ports or []) - set(wanted)
        instance.ports = wanted
        instance.save(update_fields=["ports"])
        if gone:
            PortShare.objects.filter(
                instance=instance, port__in=gone, revoked_at__isnull=True
            ).update(revoked_at=timezone.now())
        InstanceEvent.objects.create(
            instance=instance,
            status=instance.status,
            message=later("HTTP ports through the gateway: %(ports)s.")
            % {"ports": ", ".join(str(p) for p in wanted) or "—"},
        )
        if instance.k8s_name:
            enqueue_on_commit("instances.tasks.converge_ports", instance.id)
    logger.info("gateway.ports_set instance=%s ports=%s", instance.id, wanted)
    return instance


# --- share links ----------------------------------------------------------------------------


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def share_url(instance_id: str, port: int, token: str) -> str:
    return f"{port_url(instance_id, port)}{OWN_PREFIX[1:]}share?{urlencode({'token': token})}"


def shares_live(instance: Instance) -> list[PortShare]:
    return list(instance.shares.filter(revoked_at__isnull=True).order_by("port", "created_at"))


def share_create(*, instance: Instance, port: int, user: User) -> tuple[PortShare, str]:
    """A link that opens one served port of the instance to whoever holds it. Returns the
    share and its link, which is shown this once (only a hash of its token is kept)."""
    if port not in served_ports(instance):
        raise InvalidInput(
            _("Port %(port)s is not served by this instance: add it to its ports first.")
            % {"port": port},
            code="port_not_served",
        )
    with transaction.atomic():
        locked = instance_locked(instance.id)
        if locked.status in ENDED:
            raise Conflict(
                _("This instance is %(state)s; its ports cannot be shared.")
                % {"state": InstanceStatus(locked.status).label.lower()},
                code="wrong_state",
            )
        if locked.shares.filter(revoked_at__isnull=True).count() >= MAX_SHARES:
            raise Conflict(
                _("An instance may have %(max)d share links at once: revoke one first.")
                % {"max": MAX_SHARES},
                code="share_limit",
            )
        token = secrets.token_urlsafe(32)
        share = PortShare.objects.create(
            instance=locked, port=port, token_hash=_digest(token), created_by=user
        )
    logger.info("gateway.share_created instance=%s port=%s share=%s", instance.id, port, share.id)
    return share, share_url(instance.id, port, token)


def share_revoke(*, instance: Instance, share_id: str) -> PortShare:
    """The link stops working at the next request through the gateway."""
    revoked = PortShare.objects.filter(
        pk=share_id, instance=instance, revoked_at__isnull=True
    ).update(revoked_at=timezone.now())
    if not revoked:
        raise NotFound(
            _("No share link %(id)s on this instance.") % {"id": share_id},
            code="share_not_found",
        )
    logger.info("gateway.share_revoked instance=%s share=%s", instance.id, share_id)
    return PortShare.objects.get(pk=share_id)


def shares_revoke_unusable(*, tenant_id: str, user_id: str, role: str | None) -> int:
    """Revoke the live share links `user_id` made on the tenant's instances that their role
    (None: no longer a member) does not let them use: a removed or demoted member's links stop
    working at the next request. The number revoked."""
    live = PortShare.objects.filter(
        created_by_id=user_id, instance__tenant_id=tenant_id, revoked_at__isnull=True
    ).values_list("id", "instance__created_by_id")
    gone = [pk for pk, orderer in live if not may_use(role, user_id, orderer)]
    revoked = PortShare.objects.filter(pk__in=gone).update(revoked_at=timezone.now())
    if revoked:
        logger.info("gateway.shares_revoked tenant=%s user=%s n=%d", tenant_id, user_id, revoked)
    return revoked


# --- who may pass ---------------------------------------------------------------------------


@dataclass
class Verdict:
    """The authorization check's answer to the proxy: 200 lets the request through with
    `headers` added to it on the way to the instance; anything else goes back to the browser
    as it is (a redirect, with the address's cookie when `cookie` is set)."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""
    cookie: str | None = None


def _page(status: int, title: str, text: str) -> Verdict:
    body = (
        f"<!doctype html><meta charset='utf-8'><title>{escape(title)}</title>"
        f"<h1>{escape(title)}</h1><p>{escape(text)}</p>"
    )
    return Verdict(status, {"Content-Type": "text/html; charset=utf-8"}, body)


def _not_found() -> Verdict:
    # The same answer whether the instance is another tenant's or does not exist.
    return _page(404, _("Not found"), _("There is nothing at this address."))


def _redirect(location: str, cookie: str | None = None) -> Verdict:
    return Verdict(302, {"Location": location}, cookie=cookie)


def _to_login(host: str, uri: str, method: str) -> Verdict:
    """Through the console's log-in, which hands this address a cookie for its owner. A
    request a redirect cannot repeat (a form post, an API call) is refused instead."""
    if method.upper() not in ("GET", "HEAD"):
        return _page(401, _("Sign in"), _("Open this address in a browser to sign in first."))
    back = f"{settings.GATEWAY_SCHEME}://{host}{uri}"
    return _redirect(public_url(f"/gateway/login?next={quote(back)}"))


def _instance_by_lower_id(lower_id: str) -> Instance | None:
    return (
        Instance.objects.alias(lower_id=Lower("id"))
        .filter(lower_id=lower_id)
        .only("id", "tenant_id", "created_by_id", "status", "ports", "jupyter_token")
        .first()
    )


def _cookie_grant(value: str | None, label: str) -> dict[str, str] | None:
    """What an address's cookie grants (a user, or a share link), if it is ours, unexpired and
    made for this very address."""
    if not value:
        return None
    try:
        grant = signing.loads(
            value, salt=_COOKIE_SALT, max_age=settings.GATEWAY_SESSION_HOURS * 3600
        )
    except signing.BadSignature:
        return None
    if not isinstance(grant, dict) or grant.get("h") != label:
        return None
    return grant


def gateway_check(*, host: str, uri: str, method: str, cookie: str | None) -> Verdict:
    """The proxy's question: may this request to `host` pass? 200 for a person who may use the
    instance (its owner; in a team, its orderer, the team's owners and admins: usable_by, read
    at every request, so a removed or demoted member is refused at once) with the address's
    cookie, or for a live share link of this port, while the instance runs and serves the port;
    Jupyter's gets its token added. Without a cookie: off to the log-in (for every well-formed
    address alike, so that nothing tells whether an instance exists); with one, an instance the
    person may not use, or a missing one, is a 404."""
    parsed = host_parse(host)
    if parsed is None:
        return _not_found()
    lower_id, port = parsed
    label = host_label(lower_id, port)
    path = uri.split("?", 1)[0] or "/"
    if path.startswith(OWN_PREFIX):
        query = parse_qs(urlsplit(uri).query)
        if path == OWN_PREFIX + "auth":
            return _login_redeem(host, label, query)
        if path == OWN_PREFIX + "share":
            return _share_redeem(lower_id, port, label, query)
        return _not_found()
    grant = _cookie_grant(cookie, label)
    if grant is None:
        return _to_login(host, uri, method)
    instance = _instance_by_lower_id(lower_id)
    if "s" in grant:
        share = PortShare.objects.filter(pk=grant["s"], revoked_at__isnull=True).first()
        if share is None or instance is None or share.instance_id != instance.id:
            return _to_login(host, uri, method)
    else:
        user = User.objects.filter(pk=grant.get("u"), is_active=True).only("tenant_id").first()
        if user is None:
            return _to_login(host, uri, method)
        if instance is None or not usable_by(user, instance):
            return _not_found()
    if port not in served_ports(instance):
        return _page(
            404,
            _("Port not served"),
            _("This instance does not serve port %(port)s: add it to its ports in the console.")
            % {"port": port},
        )
    if instance.status != S.RUNNING:
        return _page(
            503,
            _("Not running"),
            _("The instance is %(state)s. Start it in the console, then reload this page.")
            % {"state": InstanceStatus(instance.status).label.lower()},
        )
    headers = {"Authorization": f"token {instance.jupyter_token}"} if port == JUPYTER_PORT else {}
    return Verdict(200, headers)


def _cookie(label: str, **grant: str) -> str:
    return signing.dumps({"h": label, **grant}, salt=_COOKIE_SALT)


def _safe_path(path: str) -> str:
    """A path on the same address, else `/`: never one a browser would read as another host.
    Browsers drop tabs and line breaks from an address and read `\\` as `/`, so `/<tab>/x`
    means `//x`, another host: a path with any control (or other invisible) character is
    refused whole, and so is anything but one `/` then a path (a scheme, `//host`, `/\\host`)."""
    if any(unicodedata.category(char).startswith("C") for char in path):
        return "/"
    if not path.startswith("/") or path.startswith(("//", "/\\")):
        return "/"
    return path


def _login_redeem(host: str, label: str, query: dict[str, list[str]]) -> Verdict:
    """The console's one-use, one-minute token becomes this address's cookie."""
    token = (query.get("token") or [""])[0]
    back = _safe_path((query.get("next") or ["/"])[0])
    try:
        grant = signing.loads(token, salt=_LOGIN_SALT, max_age=LOGIN_TOKEN_S)
    except signing.BadSignature:
        grant = None
    if (
        not isinstance(grant, dict)
        or grant.get("h") != label
        or not cache.add(f"gateway:login:{grant.get('n')}", True, LOGIN_TOKEN_S * 2)
    ):
        return _to_login(host, back, "GET")
    return _redirect(back, cookie=_cookie(label, u=str(grant["u"])))


def _share_redeem(lower_id: str, port: int, label: str, query: dict[str, list[str]]) -> Verdict:
    token = (query.get("token") or [""])[0]
    share = (
        PortShare.objects.filter(token_hash=_digest(token), revoked_at__isnull=True, port=port)
        .select_related("instance")
        .only("id", "instance__id")
        .first()
    )
    if share is None or share.instance.id.lower() != lower_id:
        return _page(
            404,
            _("Link not valid"),
            _("This share link was revoked or does not exist. Ask its owner for a new one."),
        )
    return _redirect("/", cookie=_cookie(label, s=share.id))


def gateway_login_target(*, user: User, next_url: str) -> str:
    """Where the console sends a signed-in user who came from a gateway address: back to it
    with a one-use token for its cookie. Only to instances the person may use (usable_by; else
    NotFound, as for an instance that does not exist), and only to the address's own path."""
    try:
        parts = urlsplit(next_url)
    except ValueError:  # an unclosed IPv6 bracket, say: no address of ours
        raise NotFound(_("There is nothing at this address.")) from None
    parsed = host_parse(parts.netloc) if parts.scheme == settings.GATEWAY_SCHEME else None
    instance = _instance_by_lower_id(parsed[0]) if parsed else None
    if parsed is None or instance is None or not usable_by(user, instance):
        raise NotFound(_("There is nothing at this address."))
    lower_id, port = parsed
    label = host_label(lower_id, port)
    token = signing.dumps(
        {"h": label, "u": user.pk, "n": secrets.token_urlsafe(12)}, salt=_LOGIN_SALT
    )
    path = _safe_path(parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    query = urlencode({"token": token, "next": path})
    return f"{settings.GATEWAY_SCHEME}://{port_host(instance.id, port)}{OWN_PREFIX}auth?{query}"
