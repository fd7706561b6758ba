"""Origins, sites and the gateway's domain, for the settings (no Django app is loaded yet) and the
checks that keep tenants' pages away from the console.

An *origin* is `scheme://host[:port]`, as a browser sends it in `Origin` (default ports left
out). A *site* is a registrable domain, the unit of SameSite cookies: pages of one site send
each other's cookies. Without a public-suffix list offline, the registrable domain is taken as
the last two labels of a name, or the last three under one of the few two-label public suffixes
of MULTI_LABEL_SUFFIXES (com.cn, edu.cn, ac.cn, co.uk …). The rule errs one way only: under a
public suffix not listed (github.io, a city in .jp), more names count as one site than really
are, never fewer, so a same-site check refuses a pair it might have allowed and never allows
one it must refuse. An IP address is a site of its own; `localhost` and its subdomains are one."""

import ipaddress
from urllib.parse import urlsplit

from django.http.request import split_domain_port

# Two-label public suffixes (all on the Public Suffix List) of the countries whose users are
# expected first; a deployment under another one is treated as its neighbours' site.
MULTI_LABEL_SUFFIXES = frozenset(
    {
        *(f"{label}.cn" for label in ("com", "net", "org", "gov", "edu", "ac", "mil")),
        *(f"{label}.hk" for label in ("com", "net", "org", "gov", "edu", "idv")),
        *(f"{label}.tw" for label in ("com", "net", "org", "gov", "edu", "idv")),
        *(f"{label}.mo" for label in ("com", "net", "org", "gov", "edu")),
        *(f"{label}.uk" for label in ("co", "org", "ac", "gov", "me", "ltd", "plc")),
        *(f"{label}.jp" for label in ("co", "ne", "or", "ac", "go")),
        *(f"{label}.kr" for label in ("co", "or", "ac", "go")),
        *(f"{label}.sg" for label in ("com", "net", "org", "gov", "edu")),
        *(f"{label}.au" for label in ("com", "net", "org", "gov", "edu")),
        "co.nz",
    }
)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(url: str) -> str:
    """`scheme://host[:port]` of an http(s) URL, lower case, without a default port; "" for
    anything else (another scheme, no host, an address urlsplit cannot read)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return ""
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return ""
    host = parts.hostname.rstrip(".")
    if ":" in host:
        host = f"[{host}]"
    shown = "" if port in (None, _DEFAULT_PORTS[parts.scheme]) else f":{port}"
    return f"{parts.scheme}://{host}{shown}"


def exact_origin(text: str) -> str:
    """origin_of `text` when it is nothing but an origin (no path but `/`, no query, no
    credentials, no `*` pattern), else ""."""
    origin = origin_of(text)
    if not origin or "*" in text:
        return ""
    parts = urlsplit(text.strip())
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        return ""
    return origin


def origin_host(origin: str) -> str:
    """`host[:port]` of an origin."""
    return origin.partition("://")[2]


def registrable_domain(host: str) -> str:
    """The site of a host name (a port, if given, is ignored): see the module's rule."""
    name = (split_domain_port(host.strip().lower())[0] or host.strip().lower()).rstrip(".")
    try:
        return str(ipaddress.ip_address(name.strip("[]")))
    except ValueError:
        pass
    labels = name.split(".")
    if labels[-1] == "localhost":
        return "localhost"
    keep = 3 if ".".join(labels[-2:]) in MULTI_LABEL_SUFFIXES else 2
    return ".".join(labels[-keep:])


def same_site(one: str, other: str) -> bool:
    return registrable_domain(one) == registrable_domain(other)


def under_domain(host: str, domain: str) -> bool:
    """Whether `host` (as a Host header gives it) is `domain` or one of its subdomains. A domain
    with a port (development: localhost:8002) covers that port only."""
    host_name, host_port = split_domain_port(host.strip().lower())
    name, port = split_domain_port(domain.strip().lower())
    if not host_name or not name or (port and host_port != port):
        return False
    return host_name == name or host_name.endswith("." + name)
