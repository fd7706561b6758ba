"""Which pages may open a terminal: the console's own addresses only (cross-site WebSocket
hijacking), read from PUBLIC_BASE_URL, CSRF_TRUSTED_ORIGINS and ALLOWED_HOSTS."""

from terminal.access import origin_allowed


def test_the_consoles_own_addresses_may_open_a_terminal(settings):
    settings.PUBLIC_BASE_URL = "https://console.example.com"
    settings.CSRF_TRUSTED_ORIGINS = ["https://*.lab.example.edu", "https://ops.example.net:8443"]
    settings.ALLOWED_HOSTS = ["console.example.com", ".starverse.example"]

    allowed = [
        "https://console.example.com",
        "https://CONSOLE.example.com",
        "https://gpu.lab.example.edu",
        "https://ops.example.net:8443",
        "https://cn.starverse.example",
    ]
    refused = [
        "https://console.example.com.evil.example",
        "https://evil.example",
        "http://gpu.lab.example.edu",  # the trusted origin is https only
        "https://ops.example.net",
        "null",
        "file://",
        "",
        None,
    ]
    assert [o for o in allowed if origin_allowed(o)] == allowed
    assert [o for o in refused if origin_allowed(o)] == []


def test_a_wildcard_allowed_host_names_no_origin(settings):
    settings.PUBLIC_BASE_URL = "https://console.example.com"
    settings.CSRF_TRUSTED_ORIGINS = []
    settings.ALLOWED_HOSTS = ["*"]

    assert origin_allowed("https://console.example.com") is True
    assert origin_allowed("https://evil.example") is False
