"""The console templates' url(): a route without arguments is reversed once a process, and the
answer still follows the script prefix (a console served under a path) and a test's URLconf."""

import pytest
from django.urls import clear_script_prefix, set_script_prefix

from starverse.jinja2 import _plain_url, _url


@pytest.fixture(autouse=True)
def _fresh() -> None:
    _plain_url.cache_clear()


def test_a_plain_route_is_reversed_once_and_served_from_memory_after():
    first = _url("console:dashboard")
    again = _url("console:dashboard")

    assert first == again == "/console/"
    assert _plain_url.cache_info().hits == 1


def test_the_script_prefix_is_part_of_the_answer():
    set_script_prefix("/starverse/")
    try:
        under = _url("console:dashboard")
    finally:
        clear_script_prefix()

    assert under == "/starverse/console/"
    assert _url("console:dashboard") == "/console/"


def test_routes_with_arguments_are_reversed_each_time():
    assert _url("instances:detail", "ins_abc") == "/console/instances/ins_abc/"
    assert _plain_url.cache_info().currsize == 0


def test_a_new_urlconf_empties_the_memory(settings):
    _url("console:dashboard")
    settings.ROOT_URLCONF = "starverse.urls"  # setting_changed, as a test's own URLconf sends

    assert _plain_url.cache_info().currsize == 0
