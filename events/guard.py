"""The address guard of every URL the platform posts to for a tenant (webhooks, chat bots): a
URL may not point the platform at its own network. Its host is resolved and every address must
be global, outside the cluster's ranges, unless the operator allows it (WEBHOOK_ALLOWED_CIDRS).
Checked when a URL is saved and again at each send, on the addresses the send then connects to,
so a name that resolves elsewhere later (DNS rebinding) is refused too."""

import ipaddress
import socket
from typing import NamedTuple
from urllib.parse import urlsplit

from django.conf import settings
from django.utils.translation import gettext as _

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class AddressRefused(Exception):
    """The URL is malformed, its host does not resolve, or it resolves to an address the
    guard refuses; the message says which, for the user."""


class Target(NamedTuple):
    """A checked URL: where to connect (`address`, `port`) and what to ask for there."""

    scheme: str
    host: str
    port: int
    path: str
    address: str


def _networks(cidrs: list[str]) -> list[IpNetwork]:
    return [ipaddress.ip_network(cidr, strict=False) for cidr in cidrs]


def _cluster_networks() -> list[IpNetwork]:
    """The cluster's own ranges, where settings know them (pods, Services, API server, nodes)."""
    cidrs: list[str] = []
    for name in ("CLUSTER_POD_CIDR", "CLUSTER_SERVICE_CIDR", "KUBE_API_CIDR", "CLUSTER_NODE_CIDR"):
        cidrs.extend(getattr(settings, name, []))
    return _networks(cidrs)


def address_allowed(address: IpAddress) -> bool:
    """Allowed: in WEBHOOK_ALLOWED_CIDRS, else global (not loopback, link-local, private,
    shared, reserved or multicast) and outside the cluster's ranges."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if any(address in network for network in _networks(settings.WEBHOOK_ALLOWED_CIDRS)):
        return True
    if not address.is_global or address.is_multicast:
        return False
    return not any(address in network for network in _cluster_networks())


def url_parts(url: str) -> tuple[str, str, int, str]:
    """Scheme, host, port and path (with its query) of an http(s) URL, or AddressRefused."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AddressRefused(_("Give an http:// or https:// URL."))
    if parts.username or parts.password:
        raise AddressRefused(_("Leave the user name and password out of the URL."))
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise AddressRefused(_("The URL's port is not a number from 1 to 65535.")) from None
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, parts.hostname, port, path


def resolve(url: str) -> Target:
    """The URL checked, with the first of its host's addresses to connect to; AddressRefused
    when the host does not resolve or any of its addresses is refused (a name with one private
    address among public ones could be steered to it)."""
    scheme, host, port, path = url_parts(url)
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise AddressRefused(
            _("The host %(host)s does not resolve; check the URL.") % {"host": host}
        ) from None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in found]
    refused = [str(address) for address in addresses if not address_allowed(address)]
    if refused or not addresses:
        raise AddressRefused(
            _(
                "The host %(host)s resolves to %(address)s, an internal address webhooks may not "
                "reach; give a public URL."
            )
            % {"host": host, "address": ", ".join(refused)}
        )
    return Target(scheme, host, port, path, str(addresses[0]))
