"""``python -m devstack.chatbots --port 12112 [--secret SEC…]``: a local stand-in for the group
bots' JSON APIs (WeCom 企业微信, DingTalk 钉钉, Feishu 飞书) and a webhook receiver, for the
tests and `make run`. It checks what each service checks — DingTalk's timestamp and sign in the
URL, Feishu's in the body, both with `secret` — answers as each does (`errcode`/`code` 0, or
their error codes) and keeps what it received, read at GET /__received.

- POST /wecom/send?key=K                 {"msgtype": "text", "text": {"content": …}}
- POST /dingtalk/robot/send?access_token=T&timestamp=…&sign=…
- POST /feishu/hook/<token>              {"timestamp", "sign", "msg_type": "text", "content"}
- POST /hook/<name>                      any body: a webhook receiver; `behaviour[name]` sets
  its answer (status, seconds to wait, a Location to redirect to).

A bot fails as `behaviour[<its key, access_token or token>]` says (status, body), for its next
`times` posts (0: every post), before anything is checked or kept."""

import argparse
import base64
import contextlib
import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

MAX_BODY = 1024 * 1024


@dataclass
class Behaviour:
    """How /hook/<name> answers, or how a bot fails (for its next `times` posts; 0: all)."""

    status: int = 200
    delay_s: float = 0.0
    location: str = ""
    body: bytes = b'{"ok": true}'
    times: int = 0


def dingtalk_sign(secret: str, timestamp: str) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def feishu_sign(secret: str, timestamp: str) -> str:
    digest = hmac.new(f"{timestamp}\n{secret}".encode(), b"", hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


class ChatBots:
    """The stand-in, served from a thread: `url`, what it `received`, and `behaviour` per hook."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, secret: str = "") -> None:
        self.secret = secret
        self.host = host
        self.received: list[dict[str, Any]] = []
        self.behaviour: dict[str, Behaviour] = {}
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer((host, port), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.server.server_port}"

    def start(self) -> "ChatBots":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def of(self, service: str) -> list[dict[str, Any]]:
        with self.lock:
            return [entry for entry in self.received if entry["service"] == service]

    def answer(
        self, service: str, path: str, query: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, Any]]:
        """The service's verdict on one post: (HTTP status, JSON answer)."""
        try:
            payload = json.loads(body or b"{}")
        except ValueError:
            return 400, {"errcode": 40001, "errmsg": "invalid json"}
        if service == "dingtalk" and self.secret:
            stamp = query.get("timestamp", "")
            if not stamp or query.get("sign", "") != dingtalk_sign(self.secret, stamp):
                return 200, {"errcode": 310000, "errmsg": "sign not match"}
        if service == "feishu" and self.secret:
            stamp = str(payload.get("timestamp", ""))
            if not stamp or payload.get("sign") != feishu_sign(self.secret, stamp):
                return 200, {
                    "code": 19021,
                    "msg": "sign match fail or timestamp is not within one hour from current time",
                }
        with self.lock:
            self.received.append(
                {"service": service, "path": path, "query": query, "json": payload}
            )
        if service == "feishu":
            return 200, {"code": 0, "msg": "success"}
        return 200, {"errcode": 0, "errmsg": "ok"}

    def failing(self, service: str, path: str, query: dict[str, str]) -> Behaviour | None:
        """The failure a bot is set to answer with now, counting it down; None: none."""
        key = path.rsplit("/", 1)[-1] if service == "feishu" else query.get("key", "")
        key = query.get("access_token", key) if service == "dingtalk" else key
        with self.lock:
            behaviour = self.behaviour.get(key)
            if behaviour is None:
                return None
            if behaviour.times == 1:
                del self.behaviour[key]
            elif behaviour.times > 1:
                behaviour.times -= 1
            return behaviour

    def hook(self, name: str, headers: dict[str, str], body: bytes) -> Behaviour:
        with self.lock:
            self.received.append(
                {
                    "service": "hook",
                    "path": name,
                    "headers": headers,
                    "body": body.decode("utf-8", "replace"),
                }
            )
            return self.behaviour.get(name, Behaviour())


def _handler(bots: ChatBots) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for key, value in {"Content-Type": "application/json", **(headers or {})}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(body)  # a client that timed out has gone

        def do_GET(self) -> None:
            if self.path == "/__received":
                with bots.lock:
                    self._send(200, json.dumps(bots.received, ensure_ascii=False).encode())
            else:
                self._send(404, b'{"errcode": 404}')

        def do_POST(self) -> None:
            length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
            body = self.rfile.read(length)
            parts = urlsplit(self.path)
            query = {key: values[0] for key, values in parse_qs(parts.query).items()}
            if parts.path.startswith("/hook/"):
                behaviour = bots.hook(parts.path[len("/hook/") :], dict(self.headers.items()), body)
                if behaviour.delay_s:
                    time.sleep(behaviour.delay_s)
                extra = {"Location": behaviour.location} if behaviour.location else {}
                self._send(behaviour.status, behaviour.body, extra)
                return
            service = {"/wecom/send": "wecom", "/dingtalk/robot/send": "dingtalk"}.get(parts.path)
            if service is None and parts.path.startswith("/feishu/hook/"):
                service = "feishu"
            if service is None:
                self._send(404, b'{"errcode": 404, "errmsg": "no such bot"}')
                return
            failure = bots.failing(service, parts.path, query)
            if failure is not None:
                self._send(failure.status, failure.body)
                return
            status, answer = bots.answer(service, parts.path, query, body)
            self._send(status, json.dumps(answer, ensure_ascii=False).encode())

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.chatbots", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=12112)
    parser.add_argument("--secret", default="", help="DingTalk's and Feishu's signing secret.")
    args = parser.parse_args(argv)
    bots = ChatBots(args.host, args.port, args.secret)
    print(f"service=chatbots url={bots.url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        bots.server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
