"""What production settings refuse to start with, each in a fresh interpreter: a console and a
gateway of one site (a tenant's page would be same-site with the console), and tenant egress
left open to the nodes (CLUSTER_NODE_CIDR unset)."""

import pytest

from tests.factories import load_production_settings


@pytest.mark.parametrize(
    ("console", "gateway", "site"),
    [
        ("https://console.example.com", "gw.example.com", "example.com"),
        ("https://example.com", "gw.example.com", "example.com"),
        ("https://console.example.com:8443/", "ins.GW.example.com", "example.com"),
        ("https://console.pku.edu.cn", "gw.pku.edu.cn", "pku.edu.cn"),
        ("https://console.lab.ac.uk", "gw.lab.ac.uk", "lab.ac.uk"),
    ],
)
def test_a_console_and_a_gateway_of_one_site_are_refused(console, gateway, site):
    status, error = load_production_settings(PUBLIC_BASE_URL=console, GATEWAY_DOMAIN=gateway)

    assert status != 0
    assert "are one site" in error and f"({site})" in error
    assert "Give the gateway a registrable domain of its own" in error


@pytest.mark.parametrize(
    ("console", "gateway"),
    [
        ("https://console.example.com", "gw.example-usercontent.com"),
        ("https://console.pku.edu.cn", "gw.tsinghua.edu.cn"),
        ("https://console.starverse.example", "gw.starverse-usercontent.example"),
    ],
)
def test_a_gateway_on_a_site_of_its_own_starts(console, gateway):
    assert load_production_settings(PUBLIC_BASE_URL=console, GATEWAY_DOMAIN=gateway) == (0, "")


def test_tenant_egress_must_be_closed_to_the_nodes():
    status, error = load_production_settings(CLUSTER_NODE_CIDR=None)

    assert status != 0
    assert "Set CLUSTER_NODE_CIDR" in error
