"""The server side of RFC 6455 WebSockets for the Kubernetes API emulator (a development
stand-in), stdlib only: the opening handshake's accept key and framing over the connection an
``http.server`` handler already holds. Enough for the exec subresource: masked client frames,
fragmented messages, ping/pong and the closing handshake."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import struct
import threading
from io import BufferedIOBase

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
MAX_MESSAGE = 16 * 2**20


class Closed(Exception):
    """The peer closed the connection (a close frame, or the socket ended)."""

    def __init__(self, code: int | None = None) -> None:
        super().__init__(f"websocket closed (code {code})")
        self.code = code


class ProtocolError(Exception):
    pass


def accept_key(key: str) -> str:
    """Sec-WebSocket-Accept for a client's Sec-WebSocket-Key."""
    digest = hashlib.sha1((key.strip() + GUID).encode(), usedforsecurity=False).digest()
    return base64.b64encode(digest).decode()


def frame(opcode: int, payload: bytes, *, fin: bool = True) -> bytes:
    """One unmasked (server-to-client) frame."""
    head = bytes([(0x80 if fin else 0) | opcode])
    size = len(payload)
    if size < 126:
        head += bytes([size])
    elif size < 2**16:
        head += bytes([126]) + struct.pack(">H", size)
    else:
        head += bytes([127]) + struct.pack(">Q", size)
    return head + payload


class ServerSocket:
    """A WebSocket after the handshake: ``receive`` returns whole messages (answering pings on
    the way), ``send`` may be called from any thread."""

    def __init__(self, rfile: BufferedIOBase, wfile: BufferedIOBase) -> None:
        self._rfile, self._wfile = rfile, wfile
        self._send_lock = threading.Lock()
        self.closed = False

    def _read(self, size: int) -> bytes:
        data = self._rfile.read(size) if size else b""
        if len(data) < size:
            raise Closed(None)
        return data

    def _frame(self) -> tuple[bool, int, bytes]:
        first, second = self._read(2)
        fin, opcode = bool(first & 0x80), first & 0x0F
        if not second & 0x80:
            raise ProtocolError("client frames must be masked")
        size = second & 0x7F
        if size == 126:
            size = struct.unpack(">H", self._read(2))[0]
        elif size == 127:
            size = struct.unpack(">Q", self._read(8))[0]
        if size > MAX_MESSAGE:
            raise ProtocolError("frame too large")
        mask = self._read(4)
        masked = self._read(size)
        payload = bytes(byte ^ mask[index % 4] for index, byte in enumerate(masked))
        return fin, opcode, payload

    def receive(self) -> tuple[int, bytes]:
        """The next data message as (TEXT or BINARY, payload); Closed once the peer closes."""
        opcode, parts = 0, b""
        while True:
            fin, code, payload = self._frame()
            if code == PING:
                self.send(PONG, payload)
                continue
            if code == PONG:
                continue
            if code == CLOSE:
                status = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None
                self.close(status or 1000)
                raise Closed(status)
            if code in (TEXT, BINARY):
                opcode, parts = code, payload
            elif code == CONTINUATION and opcode:
                parts += payload
            else:
                raise ProtocolError(f"unexpected opcode {code}")
            if len(parts) > MAX_MESSAGE:
                raise ProtocolError("message too large")
            if fin:
                return opcode, parts

    def send(self, opcode: int, payload: bytes) -> None:
        with self._send_lock:
            if self.closed and opcode != CLOSE:
                raise Closed(None)
            self._wfile.write(frame(opcode, payload))
            self._wfile.flush()

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Send the close frame once (the peer's close frame, if any, is its answer)."""
        if self.closed:
            return
        with contextlib.suppress(OSError):
            self.send(CLOSE, struct.pack(">H", code) + reason.encode()[:120])
        self.closed = True
