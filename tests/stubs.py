"""A small HTTP server on 127.0.0.1 answering GETs with a function, for the tests that stand in
for a service the code under test calls (the dev gateway's admin URL, the console's key check)."""

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (status, JSON body) for a request's headers
Respond = Callable[[Any], tuple[int, bytes]]


class StubServer:
    def __init__(self, respond: Respond, path: str = "/") -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body = respond(self.headers)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{path}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
