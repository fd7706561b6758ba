"""The embedded broker of `make run` (no Redis): kombu's file-system transport with one fix.

kombu writes a message file in place (open, then write) while a consumer may already move and
read it, so a busy queue (a task every second) sometimes hands the worker an empty file, whose
JSON error stops the worker and with it `make run`. Here a message is written under a name the
consumer skips and renamed into place in one step (``os.replace`` within the folder is atomic),
so a consumer sees a message whole or not at all. Production uses Redis (REDIS_URL)."""

import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


def message_name(queue: str) -> str:
    """What kombu names a message of `queue` (its consumers pick files by this pattern)."""
    return f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"


class Channel(filesystem.Channel):
    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:  # type: ignore[override]
        final = os.path.join(self.data_folder_out, message_name(queue))
        # a leading dot: the consumer's pattern (`<name>.<queue>.msg`) never matches it
        partial = os.path.join(self.data_folder_out, f".partial-{uuid.uuid4()}")
        try:
            with open(partial, "wb") as f:
                f.write(str_to_bytes(dumps(message)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
