"""Origins, sites and the gateway's domain (starverse.core.sites): the registrable domain is the
last two labels, or three under a listed two-label public suffix, so it is never finer than the
Public Suffix List's."""

import pytest

from starverse.core.sites import (
    exact_origin,
    origin_of,
    registrable_domain,
    same_site,
    under_domain,
)


@pytest.mark.parametrize(
    ("host", "site"),
    [
        ("console.example.com", "example.com"),
        ("a.b.c.example.com:8443", "example.com"),
        ("Example.COM.", "example.com"),
        ("example.com", "example.com"),
        ("gpu.pku.edu.cn", "pku.edu.cn"),
        ("console.starverse.com.cn", "starverse.com.cn"),
        ("x.lab.ac.uk", "lab.ac.uk"),
        ("ins-a-8888.gw.example.co.jp", "example.co.jp"),
        ("me.github.io", "github.io"),  # not listed: coarser than the PSL, never finer
        ("localhost:8002", "localhost"),
        ("ins-a-8888.localhost", "localhost"),
        ("127.0.0.1:8000", "127.0.0.1"),
        ("[2001:DB8::1]:443", "2001:db8::1"),
        ("com", "com"),
    ],
)
def test_the_registrable_domain_of_a_host(host, site):
    assert registrable_domain(host) == site


def test_same_site_compares_registrable_domains():
    assert same_site("console.example.com", "gw.example.com")
    assert same_site("console.pku.edu.cn", "ins-x.gw.pku.edu.cn")
    assert not same_site("console.example.com", "gw.example-usercontent.com")
    assert not same_site("console.pku.edu.cn", "gw.tsinghua.edu.cn")
    assert not same_site("127.0.0.1", "localhost")


@pytest.mark.parametrize(
    ("host", "domain", "under"),
    [
        ("ins-a-8888.gw.example.com", "gw.example.com", True),
        ("gw.example.com", "gw.example.com", True),
        ("INS-A-8888.GW.EXAMPLE.COM:443", "gw.example.com", True),
        ("evilgw.example.com", "gw.example.com", False),
        ("console.example.com", "gw.example.com", False),
        ("ins-a-8888.localhost:8002", "localhost:8002", True),
        ("localhost:8000", "localhost:8002", False),
        ("ins-a-8888.localhost", "localhost:8002", False),
        ("", "gw.example.com", False),
    ],
)
def test_under_domain(host, domain, under):
    assert under_domain(host, domain) is under


def test_origins_drop_default_ports_and_exact_ones_have_nothing_else():
    assert (
        origin_of("https://Console.Example.com:443/billing/?x=1") == "https://console.example.com"
    )
    assert origin_of("http://127.0.0.1:8000") == "http://127.0.0.1:8000"
    assert origin_of("http://[::1]:80/") == "http://[::1]"
    assert [origin_of(u) for u in ("null", "file:///x", "wss://a.example", "http://[::1/")] == [
        "",
        "",
        "",
        "",
    ]
    assert exact_origin("https://ops.example.net:8443/") == "https://ops.example.net:8443"
    assert [
        exact_origin(u)
        for u in (
            "https://*.example.net",
            "https://ops.example.net/console",
            "https://ops.example.net?x",
            "https://me@ops.example.net",
        )
    ] == ["", "", "", ""]
