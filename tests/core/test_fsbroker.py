"""The embedded broker of `make run`: a message is never visible to a worker before it is
whole (kombu's own file-system transport wrote in place, and a worker that read a file being
written died on its JSON error, taking `make run` down with it)."""

import builtins
import threading
from pathlib import Path
from typing import Any

from kombu import Connection

from starverse.core.fsbroker import Transport


def _connection(folder: Path) -> Connection:
    return Connection(
        transport=Transport,
        transport_options={
            "data_folder_in": str(folder),
            "data_folder_out": str(folder),
            "control_folder": str(folder / "control"),
            "store_processed": False,
        },
    )


def test_a_message_file_appears_only_whole(tmp_path: Path, monkeypatch: Any) -> None:
    written: list[str] = []
    real_open = builtins.open

    def watching(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if "w" in mode:
            written.append(str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", watching)
    with _connection(tmp_path) as conn:
        conn.SimpleQueue("q").put({"n": 1})
    monkeypatch.undo()
    assert written and not any(name.endswith(".msg") for name in written)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".q.msg")]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".partial-")]


def test_a_busy_queue_hands_the_consumer_every_message_whole(tmp_path: Path) -> None:
    count = 400
    with _connection(tmp_path) as producer_conn, _connection(tmp_path) as consumer_conn:
        producer = producer_conn.SimpleQueue("busy")
        consumer = consumer_conn.SimpleQueue("busy")

        def produce() -> None:
            for n in range(count):
                producer.put({"n": n, "pad": "x" * 4000})

        thread = threading.Thread(target=produce)
        thread.start()
        got: list[int] = []
        while len(got) < count:
            message = consumer.get(block=True, timeout=10)
            got.append(message.payload["n"])
            message.ack()
        thread.join()
    assert sorted(got) == list(range(count))
