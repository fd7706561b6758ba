"""The events tests' stand-in: devstack.chatbots on 127.0.0.1 (the bots' JSON APIs and a
webhook receiver), which the address guard lets through only with WEBHOOK_ALLOWED_CIDRS."""

from collections.abc import Iterator
from typing import Any

import pytest

from devstack.chatbots import Behaviour, ChatBots

BOT_SECRET = "SEC0123456789abcdef"


@pytest.fixture(scope="session")
def _bots_server() -> Iterator[ChatBots]:
    bots = ChatBots(secret=BOT_SECRET).start()
    yield bots
    bots.stop()


@pytest.fixture
def bots(_bots_server: ChatBots, settings: Any) -> Iterator[ChatBots]:
    """The stand-in, emptied, with loopback allowed and short timeouts."""
    settings.WEBHOOK_ALLOWED_CIDRS = ["127.0.0.0/8"]
    settings.WEBHOOK_READ_TIMEOUT_S = 0.5
    settings.WEBHOOK_TOTAL_TIMEOUT_S = 1.0
    with _bots_server.lock:
        _bots_server.received.clear()
        _bots_server.behaviour.clear()
    yield _bots_server
    with _bots_server.lock:
        _bots_server.behaviour.clear()


def behave(bots: ChatBots, name: str, **how: Any) -> None:
    with bots.lock:
        bots.behaviour[name] = Behaviour(**how)
