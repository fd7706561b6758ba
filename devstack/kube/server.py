"""HTTP front end of the Kubernetes API emulator (a development stand-in, never a production
control plane): apiserver-shaped routing, discovery, JSON (and Table) responses, chunked watch
streams, the node proxy to the emulated kubelets (:mod:`.stats`), exec into pods over WebSocket
(:mod:`.podexec`) and injected faults, on ``http.server.ThreadingHTTPServer``."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from . import errors as err
from . import openapi, podexec, protobuf
from . import resources as res
from .api import Api
from .network import ServiceNetwork, service_address
from .objects import success_status
from .patch import APPLY_PATCH, JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH
from .podlogs import LogBook, LogLine
from .rbac import BINDING_PLURALS, Attributes, Authorizer, User, unauthorized
from .shell import Peer, ReplacedProgram, SimulatedShell, container_for, peers_of
from .stats import NodeProxy
from .tables import to_table, wants_table
from .volumedata import VolumeData
from .watch import stream_watch
from .websocket import ServerSocket, accept_key

log = logging.getLogger("devstack.kube")
_LEGACY_BINDING = re.compile(r"^/api/v1/namespaces/([^/]+)/bindings/?$")
_NODE_PROXY = re.compile(r"^/api/v1/nodes/([^/]+)/proxy(?:/(.*))?$")
_POD_EXEC = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/exec/?$")
SCALABLE = ("deployments", "replicasets")  # kinds with a scale subresource
REQUEST_LOG = 1000  # the latest API requests kept for tests to read
FOLLOW_CHECK_S = 0.5  # how often a followed log checks that its pod still exists


@dataclass
class Fault:
    status: int
    remaining: int
    verb: str | None
    resource: str | None
    retry_after_s: int


class FaultInjector:
    """Queued failures answered instead of real responses (``inject_api_fault``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def take(self, verb: str, resource: str) -> err.ApiError | None:
        with self._lock:
            for fault in self._faults:
                if fault.verb not in (None, verb):
                    continue
                if fault.resource not in (None, resource, resource.split("/")[0]):
                    continue
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._faults.remove(fault)
                return err.injected(fault.status, fault.retry_after_s)
        return None


@dataclass
class ServerContext:
    api: Api
    faults: FaultInjector
    version_info: dict[str, Any]
    bookmark_interval_s: float = 1.0
    max_watch_s: float = 1800.0
    node_proxy: NodeProxy | None = None
    connections: set[socket.socket] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    watches: int = 0  # watch streams being served now
    authorizer: Authorizer | None = None  # RBAC, when the emulator was given users
    network: ServiceNetwork | None = None  # Services' ports (:mod:`.network`)
    execs: podexec.ExecRegistry = field(default_factory=podexec.ExecRegistry)
    # programs a tenant replaced in a pod's container, by the pod's uid, then by path
    replaced: dict[str, dict[str, ReplacedProgram]] = field(default_factory=dict)
    # files exec wrote in a pod's container (shell.Container.written), by the pod's uid
    written: dict[str, dict[str, str]] = field(default_factory=dict)
    # API requests received (the Service network's aside), and the latest (method, path)
    requests_total: int = 0
    request_log: deque[tuple[str, str]] = field(default_factory=lambda: deque(maxlen=REQUEST_LOG))
    logs: LogBook | None = None  # the kubelets' container logs (:mod:`.podlogs`)
    volume_data: VolumeData | None = None  # the volumes' files, for exec's shell


@dataclass
class Target:
    rt: res.ResourceType
    namespace: str | None  # None: cluster-scoped, or all namespaces for a namespaced type
    name: str | None
    subresource: str | None


def parse_target(path: str) -> Target | dict[str, Any] | None:
    """A resource target, a discovery document, or None for an unknown path."""
    segments = [s for s in path.split("/") if s]
    if segments[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", segments[2:]
    elif segments[:1] == ["apis"] and len(segments) >= 3:
        group, version, rest = segments[1], segments[2], segments[3:]
    else:
        return None
    if not rest:
        return res.api_resource_list(group, version)
    if (
        rest[0] == "namespaces"
        and len(rest) >= 3
        and not (group == "" and len(rest) == 3 and rest[2] in ("status", "finalize"))
    ):
        namespace, plural, tail = rest[1], rest[2], rest[3:]
    else:
        namespace, plural, tail = None, rest[0], rest[1:]
    rt = res.lookup(group, version, plural)
    if rt is None or len(tail) > 2 or (namespace is not None and not rt.namespaced):
        return None
    if namespace is None and rt.namespaced and tail:
        return None  # namespaced objects need /namespaces/{ns}/ in the path
    return Target(rt, namespace, tail[0] if tail else None, tail[1] if len(tail) > 1 else None)


def _int_param(params: dict[str, str], key: str) -> int:
    try:
        return int(params.get(key) or 0)
    except ValueError as exc:
        raise err.bad_request(f"{key} must be an integer") from exc


def _flag(params: dict[str, str], key: str) -> bool:
    return params.get(key, "").lower() in ("true", "1")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "starverse-kube-emulator/dev"
    timeout = 300
    server: EmulatorHTTPServer

    def setup(self) -> None:
        super().setup()
        # headers and body go out as separate writes: without this, Nagle + delayed ACK
        # add ~40 ms to every keep-alive response
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.ctx.lock:
            self.server.ctx.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.ctx.lock:
            self.server.ctx.connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    # --- plumbing ----------------------------------------------------------------------------

    def _handle(self, method: str) -> None:
        address = service_address(self.headers.get("Host", ""))
        if address is not None and self.server.ctx.network is not None:
            self._serve_network(method, address)
            return
        started = time.perf_counter()
        self._code = 0
        self._verb = ""
        self._resource = ""
        url = urlsplit(self.path)
        with self.server.ctx.lock:
            self.server.ctx.requests_total += 1
            self.server.ctx.request_log.append((method, url.path))
        params = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        raw = b""
        try:
            raw = self._read_body()
            self._route(method, url.path, params, raw)
        except err.ApiError as exc:
            self._send_json(exc.code, exc.status(), exc.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug in the emulator: answer like the apiserver would
            log.exception("kube-emulator internal error path=%s", url.path)
            self._send_json(500, err.internal_error(f"{type(exc).__name__}: {exc}").status())
        finally:
            log.info(
                "kube-emulator request method=%s path=%s verb=%s resource=%s code=%s "
                "duration_ms=%.1f content_type=%s user_agent=%s",
                method,
                url.path,
                self._verb or "-",
                self._resource or "-",
                self._code,
                (time.perf_counter() - started) * 1000,
                self.headers.get("Content-Type", "-") if raw else "-",
                json.dumps(self.headers.get("User-Agent", "")),
            )

    def _serve_network(self, method: str, address: tuple[str, str, int]) -> None:
        """A request to a Service's port on the emulated pod network (:mod:`.network`)."""
        assert self.server.ctx.network is not None
        try:
            body = self._read_body()
            namespace, service, port = address
            headers = {key.lower(): value for key, value in self.headers.items()}
            path = urlsplit(self.path).path or "/"
            answer = self.server.ctx.network.answer(
                namespace, service, port, path, headers, method, body
            )
            self.send_response(answer.status)
            for key, value in answer.headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            if method != "HEAD":
                self.wfile.write(answer.body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _decode(self, raw: bytes) -> Any:
        if not raw.strip():
            return None
        content_type = self.headers.get("Content-Type", "application/json").lower()
        if content_type.startswith(protobuf.PROTOBUF):
            return protobuf.decode(raw)
        try:
            return json.loads(raw)
        except ValueError as exc:
            if "yaml" in content_type:
                try:
                    import yaml

                    return yaml.safe_load(raw)
                except ImportError as missing:
                    raise err.unsupported_media_type(content_type) from missing
                except yaml.YAMLError as bad:
                    raise err.bad_request(f"error decoding YAML: {bad}") from bad
            raise err.bad_request(f"couldn't get version/kind; json parse error: {exc}") from exc

    def _send_bytes(
        self, code: int, payload: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self._code = code
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-cache, private")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        for warning in getattr(self, "_warnings", []):
            self.send_header("Warning", f"299 - {json.dumps(warning)}")
        self.end_headers()
        self.wfile.write(payload)

    def _send_json(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self._send_bytes(code, json.dumps(body).encode(), "application/json", headers)

    # --- routing -----------------------------------------------------------------------------

    def _route(self, method: str, path: str, params: dict[str, str], raw: bytes) -> None:
        """Paths that name no resource first (health, discovery, the legacy bindings endpoint,
        the node proxy), then the resource the path names."""
        ctx = self.server.ctx
        self._warnings: list[str] = []
        self._user: User | None = None
        if ctx.authorizer is not None:
            self._user = ctx.authorizer.authenticate(self.headers.get("Authorization", ""))
            if self._user is None:
                raise unauthorized()
        if method == "GET":
            if path in ("/healthz", "/livez", "/readyz"):
                self._send_bytes(200, b"ok", "text/plain; charset=utf-8")
                return
            static = self._discovery(path)
            if static is not None:
                self._send_json(200, static)
                return
        legacy_binding = _LEGACY_BINDING.match(path)
        if legacy_binding and method == "POST":  # the pre-subresource /bindings endpoint
            self._verb, self._resource = "create", "bindings"
            self._authorize(Attributes("create", "", "bindings", "", legacy_binding.group(1)))
            body = self._decode(raw)
            meta = body.get("metadata") if isinstance(body, dict) else None
            name = meta.get("name", "") if isinstance(meta, dict) else ""
            self._send_json(201, ctx.api.bind(legacy_binding.group(1), name, body))
            return
        node_proxy = _NODE_PROXY.match(path)
        if node_proxy and ctx.node_proxy is not None:
            self._proxy_to_kubelet(ctx.node_proxy, method, node_proxy, params)
            return
        pod_exec = _POD_EXEC.match(path)
        if pod_exec:
            self._serve_exec(method, pod_exec.group(1), pod_exec.group(2))
            return
        target = parse_target(path)
        if isinstance(target, dict) and method == "GET":
            self._send_json(200, target)
            return
        if not isinstance(target, Target):
            raise err.path_not_found()
        self._serve_resource(method, target, params, raw)

    def _serve_resource(
        self, method: str, target: Target, params: dict[str, str], raw: bytes
    ) -> None:
        """The verb on a resource, after any injected fault and the query's options."""
        ctx = self.server.ctx
        verb = self._verb_for(method, target, params)
        self._verb = verb
        self._resource = target.rt.plural + (f"/{target.subresource}" if target.subresource else "")
        self._authorize_resource(verb, target, raw)
        fault = ctx.faults.take(verb, self._resource)
        if fault is not None:
            raise fault
        dry_run = params.get("dryRun") == "All"
        validation = params.get("fieldValidation") or "Strict"
        if validation not in ("Strict", "Warn", "Ignore"):
            raise err.bad_request(f"fieldValidation must be Ignore, Warn or Strict: {validation}")
        if verb == "watch":
            with ctx.lock:
                ctx.watches += 1
            try:
                stream_watch(self, ctx, target.rt, target.namespace, params)
            finally:
                with ctx.lock:
                    ctx.watches -= 1
        elif verb in ("list", "get"):
            self._serve_read(verb, target, params)
        elif verb == "patch":
            self._serve_patch(target, raw, dry_run=dry_run, validation=validation)
        elif verb in ("delete", "deletecollection"):
            self._serve_delete(verb, target, params, raw, dry_run=dry_run)
        else:
            self._serve_write(method, verb, target, raw, dry_run=dry_run, validation=validation)

    def _authorize(self, request: Attributes) -> None:
        authorizer = self.server.ctx.authorizer
        if authorizer is not None and self._user is not None:
            authorizer.check(self._user, request)

    def _authorize_resource(self, verb: str, target: Target, raw: bytes) -> None:
        """RBAC for a resource request; the namespace object itself counts as in its own
        namespace (a RoleBinding there can grant it), and a binding needs `bind` on its role."""
        authorizer = self.server.ctx.authorizer
        if authorizer is None or self._user is None:
            return
        rt, name = target.rt, target.name or ""
        namespace = target.namespace or (name if rt.plural == "namespaces" else "")
        authorizer.check(
            self._user,
            Attributes(verb, rt.group, rt.plural, target.subresource or "", namespace, name),
        )
        if rt.plural in BINDING_PLURALS and verb in ("create", "update"):
            authorizer.check_bind(self._user, self._decode(raw), namespace, rt.plural)

    def _serve_read(self, verb: str, target: Target, params: dict[str, str]) -> None:
        api, rt = self.server.ctx.api, target.rt
        namespace = target.namespace or ""
        if verb == "list":
            listing = api.list(
                rt,
                target.namespace,
                label_selector=params.get("labelSelector"),
                field_selector=params.get("fieldSelector"),
                limit=_int_param(params, "limit"),
                continue_token=params.get("continue"),
                resource_version=params.get("resourceVersion"),
            )
            self._respond_object(200, rt, listing, params, is_list=True)
        elif target.subresource == "scale":
            self._send_json(200, api.scale(rt, namespace, target.name or ""))
        elif target.subresource == "log":
            self._serve_log(api.get(rt, namespace, target.name or ""), params)
        else:
            obj = api.get(rt, namespace, target.name or "")
            self._respond_object(200, rt, obj, params)

    def _serve_log(self, pod: dict[str, Any], params: dict[str, str]) -> None:
        """``pods/{name}/log`` as the kubelet serves it: the chosen instance's kept output,
        filtered by ``sinceSeconds`` / ``sinceTime``, ``tailLines`` and ``limitBytes``, with
        ``timestamps``; ``follow`` streams new lines (chunked) until the instance ends, the pod
        goes or the emulator stops."""
        ctx = self.server.ctx
        request = LogRequest.parse(params)
        container_id = log_container_id(pod, params.get("container"), request.previous)
        log = ctx.logs.get(container_id) if ctx.logs is not None else None
        if ctx.logs is None or log is None:  # not started by this emulator's kubelets
            self._send_bytes(200, banner(pod, params.get("container")).encode(), "text/plain")
            return
        lines, serial, ended = ctx.logs.read(log)
        payload = request.render(request.select(lines))
        if not request.follow:
            self._send_bytes(200, payload, "text/plain")
            return
        self._code = 200
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        budget = request.limit_bytes or -1  # -1: no limit
        uid = pod["metadata"].get("uid")
        while True:
            if payload:
                if budget >= 0:
                    payload = payload[:budget]
                    budget -= len(payload)
                self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
                self.wfile.flush()
            if ended or budget == 0:
                break
            fresh, serial, ended = ctx.logs.wait_after(log, serial, FOLLOW_CHECK_S)
            payload = request.render(fresh)
            current = ctx.api.store.get(
                res.PODS, pod["metadata"]["namespace"], pod["metadata"]["name"]
            )
            if current is None or current["metadata"].get("uid") != uid:
                ended = True
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _serve_write(
        self, method: str, verb: str, target: Target, raw: bytes, *, dry_run: bool, validation: str
    ) -> None:
        """create (a binding, or any object) and update."""
        api, rt = self.server.ctx.api, target.rt
        namespace = target.namespace or ""
        if verb == "create" and target.subresource == "binding":
            self._send_json(201, api.bind(namespace, target.name or "", self._decode(raw)))
        elif verb == "create":
            obj, self._warnings = api.create(
                rt, namespace, self._decode(raw), dry_run=dry_run, field_validation=validation
            )
            self._send_json(201, obj)
        elif verb == "update" and target.subresource == "scale":
            self._send_json(
                200,
                api.update_scale(
                    rt, namespace, target.name or "", self._decode(raw), dry_run=dry_run
                ),
            )
        elif verb == "update":
            obj, self._warnings = api.update(
                rt,
                namespace,
                target.name or "",
                self._decode(raw),
                subresource=target.subresource,
                dry_run=dry_run,
                field_validation=validation,
            )
            self._send_json(200, obj)
        else:
            raise err.method_not_allowed(method, rt.plural)

    def _serve_patch(self, target: Target, raw: bytes, *, dry_run: bool, validation: str) -> None:
        content_type = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if content_type not in (JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH, APPLY_PATCH):
            raise err.unsupported_media_type(content_type)
        if target.subresource == "scale":
            scale = self.server.ctx.api.patch_scale(
                target.rt,
                target.namespace or "",
                target.name or "",
                content_type,
                self._decode(raw),
                dry_run=dry_run,
            )
            self._send_json(200, scale)
            return
        obj, self._warnings, created = self.server.ctx.api.patch(
            target.rt,
            target.namespace or "",
            target.name or "",
            content_type,
            self._decode(raw),
            subresource=target.subresource,
            dry_run=dry_run,
            field_validation=validation,
        )
        self._send_json(201 if created else 200, obj)

    def _serve_delete(
        self, verb: str, target: Target, params: dict[str, str], raw: bytes, *, dry_run: bool
    ) -> None:
        api, rt = self.server.ctx.api, target.rt
        options = self._delete_options(raw, params)
        if verb == "delete":
            obj, removed = api.delete(
                rt, target.namespace or "", target.name or "", options, dry_run=dry_run
            )
            if removed and not rt.returns_deleted_object:
                obj = success_status(
                    obj["metadata"]["name"], rt.plural, rt.group, obj["metadata"].get("uid", "")
                )
            self._send_json(200, obj)
            return
        collection = api.delete_collection(
            rt,
            target.namespace,
            options,
            label_selector=params.get("labelSelector"),
            field_selector=params.get("fieldSelector"),
            dry_run=dry_run,
        )
        self._send_json(200, collection)

    def _proxy_to_kubelet(
        self, proxy: NodeProxy, method: str, match: re.Match[str], params: dict[str, str]
    ) -> None:
        """``nodes/{name}/proxy/{path}`` (or ``?path=``): GET only, as the kubelet's read-only
        endpoints; a ``scheme:name:port`` node reference is reduced to the name, and the path
        is percent-decoded (the generated client sends ``stats%2Fsummary``)."""
        self._verb, self._resource = "get", "nodes/proxy"
        if method != "GET":
            raise err.method_not_allowed(method, "nodes/proxy")
        parts = unquote(match.group(1)).split(":")
        node_name = parts[1] if parts[0] in ("http", "https") and len(parts) > 1 else parts[0]
        self._authorize(Attributes("get", "", "nodes", "proxy", "", node_name))
        fault = self.server.ctx.faults.take("get", "nodes/proxy")
        if fault is not None:
            raise fault
        path = unquote(match.group(2)) if match.group(2) is not None else params.get("path", "")
        code, body, content_type = proxy.get(node_name, path)
        self._send_bytes(code, body, content_type)

    def _serve_exec(self, method: str, namespace: str, name: str) -> None:
        """``pods/{name}/exec``: authorized as ``create`` on ``pods/exec`` (what the apiserver
        asks of a WebSocket exec too), the container checked, then the WebSocket handshake and
        the session (:mod:`.podexec`) on this connection until either side ends it."""
        ctx = self.server.ctx
        self._verb, self._resource = "create", "pods/exec"
        if method not in ("GET", "POST"):
            raise err.method_not_allowed(method, "pods/exec")
        self._authorize(Attributes("create", "", "pods", "exec", namespace, name))
        fault = ctx.faults.take("create", "pods/exec")
        if fault is not None:
            raise fault
        query = parse_qs(urlsplit(self.path).query)
        command = query.get("command") or []
        if not command:
            raise err.bad_request("you must specify at least 1 command")
        pod = ctx.api.get(res.PODS, namespace, name)
        named = query.get("container")
        container = podexec.exec_container(pod, named[-1] if named else None)
        upgrade = self.headers.get("Upgrade", "").lower()
        if "websocket" not in upgrade or not self.headers.get("Sec-WebSocket-Key"):
            raise err.bad_request("Upgrade request required")
        protocol = podexec.negotiate(self.headers.get("Sec-WebSocket-Protocol", ""))
        if protocol is None:
            raise err.bad_request(
                "unable to upgrade: no supported subprotocol in Sec-WebSocket-Protocol"
            )
        node_name = (pod.get("spec") or {}).get("nodeName") or ""
        with ctx.api.store.lock:
            node = ctx.api.store.get(res.NODES, "", node_name)
            every_pod = list(ctx.api.store.items(res.PODS))
            neighbours = [p for p in every_pod if p["spec"].get("nodeName") == node_name]
            peers = peers_of(
                pod, every_pod, {n["metadata"]["name"]: n for n in ctx.api.store.items(res.NODES)}
            )
        # listed before the handshake completes: a client that sees it open finds it here
        session = ctx.execs.add(
            namespace=namespace,
            pod=name,
            container=container,
            command=tuple(command),
            user=self._user.name if self._user else "",
            protocol=protocol,
        )
        try:
            self._run_exec(session, protocol, query, pod, node, neighbours, peers, container)
        finally:
            ctx.execs.remove(session)

    def _run_exec(
        self,
        session: podexec.ExecSession,
        protocol: str,
        query: dict[str, list[str]],
        pod: dict[str, Any],
        node: dict[str, Any] | None,
        neighbours: list[dict[str, Any]],
        peers: list[Peer],
        container_name: str,
    ) -> None:
        self._code = 101
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept_key(self.headers["Sec-WebSocket-Key"]))
        if protocol:
            self.send_header("Sec-WebSocket-Protocol", protocol)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        self.connection.settimeout(None)  # a shell may sit idle as long as its client likes
        channels = podexec.Channels(ServerSocket(self.rfile, self.wfile), protocol)
        with self.server.ctx.lock:
            replaced = dict(self.server.ctx.replaced.get(pod["metadata"].get("uid", ""), {}))
            written = self.server.ctx.written.setdefault(pod["metadata"].get("uid", ""), {})
        shell = SimulatedShell(
            replace(
                container_for(pod, node, neighbours),
                peers=tuple(peers),
                replaced=replaced,
                written=written,
                volume_path=self._volume_path(pod, container_name),
            ),
            lambda data: channels.send(podexec.STDOUT, data),
            tty=(query.get("tty") or ["false"])[-1].lower() in ("true", "1"),
        )
        stdin = (query.get("stdin") or ["false"])[-1].lower() in ("true", "1")
        # the client going away (or speaking nonsense) ends the session with it
        with contextlib.suppress(podexec.Closed, podexec.ProtocolError, OSError):
            podexec.serve(channels, shell, list(session.command), stdin=stdin)

    def _volume_path(
        self, pod: dict[str, Any], container_name: str
    ) -> Callable[[str], Path | None] | None:
        """Where a path of the exec'd container lies on its pod's volumes, for the shell."""
        volume_data = self.server.ctx.volume_data
        spec = next(
            (c for c in pod["spec"].get("containers") or [] if c.get("name") == container_name),
            None,
        )
        if volume_data is None or spec is None:
            return None

        def resolve(path: str) -> Path | None:
            with volume_data.store.lock:
                place = volume_data.resolve(pod, spec, path)
            return place.path if place is not None else None

        return resolve

    @staticmethod
    def _verb_for(method: str, target: Target, params: dict[str, str]) -> str:
        allowed = {
            "status": {"GET", "PUT", "PATCH"},
            "finalize": {"PUT"},
            "binding": {"POST"},
            "log": {"GET"},
            "scale": {"GET", "PUT", "PATCH"},
        }
        owner = {"finalize": "namespaces", "binding": "pods", "log": "pods"}
        if target.subresource and (
            target.subresource not in allowed
            or owner.get(target.subresource, target.rt.plural) != target.rt.plural
            or (target.subresource == "scale" and target.rt.plural not in SCALABLE)
        ):
            raise err.path_not_found()
        if target.subresource and method not in allowed[target.subresource]:
            raise err.method_not_allowed(method, f"{target.rt.plural}/{target.subresource}")
        if target.subresource == "status" and not target.rt.status_subresource:
            raise err.path_not_found()
        if target.name is None:
            verbs = {
                "GET": "watch" if _flag(params, "watch") else "list",
                "POST": "create",
                "DELETE": "deletecollection",
            }
        else:
            verbs = {
                "GET": "get",
                "PUT": "update",
                "PATCH": "patch",
                "DELETE": "delete",
                "POST": "create",
            }
        verb = verbs.get(method)
        if verb is None or (verb == "create" and target.name and target.subresource != "binding"):
            raise err.method_not_allowed(method, target.rt.plural)
        return verb

    def _delete_options(self, raw: bytes, params: dict[str, str]) -> dict[str, Any]:
        body = self._decode(raw)
        options: dict[str, Any] = dict(body) if isinstance(body, dict) else {}
        if "gracePeriodSeconds" in params:
            try:
                options["gracePeriodSeconds"] = int(params["gracePeriodSeconds"])
            except ValueError as exc:
                raise err.bad_request("gracePeriodSeconds must be an integer") from exc
        if params.get("propagationPolicy"):
            options["propagationPolicy"] = params["propagationPolicy"]
        if options.get("propagationPolicy") not in (None, "Orphan", "Background", "Foreground"):
            raise err.bad_request(
                f"propagationPolicy: Unsupported value: {options['propagationPolicy']!r}"
            )
        if options.get("gracePeriodSeconds") is not None:
            options["gracePeriodSeconds"] = int(options["gracePeriodSeconds"])
        return options

    def _respond_object(
        self,
        code: int,
        rt: res.ResourceType,
        obj: dict[str, Any],
        params: dict[str, str],
        is_list: bool = False,
    ) -> None:
        if wants_table(self.headers.get("Accept", "")):
            items = obj["items"] if is_list else [obj]
            table = to_table(
                rt,
                items,
                params.get("includeObject", "Metadata"),
                obj["metadata"]
                if is_list
                else {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
            )
            self._send_json(code, table)
            return
        self._send_json(code, obj)

    def _discovery(self, path: str) -> dict[str, Any] | None:
        ctx = self.server.ctx
        path = path.rstrip("/") or "/"
        if path == "/version":
            return ctx.version_info
        if path == "/openapi/v3":
            return openapi.root()
        if path.startswith("/openapi/v3/"):
            document = openapi.group_version_document(path[len("/openapi/v3/") :])
            if document is None:
                raise err.path_not_found()
            return document
        if path == "/api":
            host, port = self.server.server_address[:2]
            assert isinstance(host, str)  # an AF_INET server's address
            return res.api_versions(f"{host}:{port}")
        if path == "/apis":
            return res.api_group_list()
        if path.startswith("/apis/") and path.count("/") == 2:
            group = res.api_group(path.split("/")[2])
            if group is None:
                raise err.path_not_found()
            return group
        if path == "/":
            paths = ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/openapi/v3", "/readyz"]
            paths.append("/version")
            paths += [f"/apis/{g}/{v}" for g, v in res.group_versions()]
            return {"paths": sorted(paths)}
        return None


@dataclass(frozen=True)
class LogRequest:
    """The query of a ``pods/{name}/log`` request."""

    previous: bool
    follow: bool
    timestamps: bool
    tail_lines: int | None
    since: dt.datetime | None
    limit_bytes: int | None

    @classmethod
    def parse(cls, params: dict[str, str]) -> LogRequest:
        since: dt.datetime | None = None
        if params.get("sinceSeconds"):
            seconds = _int_param(params, "sinceSeconds")
            if seconds < 1:
                raise err.bad_request("sinceSeconds: Invalid value: must be greater than 0")
            since = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)
        elif params.get("sinceTime"):
            try:
                since = dt.datetime.fromisoformat(params["sinceTime"].replace("Z", "+00:00"))
            except ValueError as exc:
                raise err.bad_request("sinceTime must be an RFC3339 time") from exc
        tail = _int_param(params, "tailLines") if params.get("tailLines") else None
        limit = _int_param(params, "limitBytes") if params.get("limitBytes") else None
        if tail is not None and tail < 0:
            raise err.bad_request("tailLines: Invalid value: must be greater than or equal to 0")
        if limit is not None and limit < 1:
            raise err.bad_request("limitBytes: Invalid value: must be greater than 0")
        return cls(
            _flag(params, "previous"),
            _flag(params, "follow"),
            _flag(params, "timestamps"),
            tail,
            since,
            limit,
        )

    def select(self, lines: list[LogLine]) -> list[LogLine]:
        if self.since is not None:
            lines = [line for line in lines if line.at >= self.since]
        if self.tail_lines is not None:
            lines = lines[-self.tail_lines :] if self.tail_lines else []
        return lines

    def render(self, lines: list[LogLine]) -> bytes:
        payload = b"".join(line.render(self.timestamps) for line in lines)
        return payload[: self.limit_bytes] if self.limit_bytes and not self.follow else payload


def log_container_id(pod: dict[str, Any], container: str | None, previous: bool) -> str:
    """The ``containerID`` whose output ``pods/{name}/log`` serves, chosen as the kubelet
    chooses it: the previous instance (``previous``), else the running one, else the one that
    terminated last; a container that never ran answers 400 as the kubelet does."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    names = [c.get("name") for c in spec.get("containers") or []]
    if container is None:
        if len(names) != 1:
            raise err.bad_request(
                f"a container name must be specified for pod {meta['name']}, choose one of: "
                f"[{' '.join(str(n) for n in names)}]"
            )
        container = str(names[0])
    if container not in names:
        raise err.bad_request(f"container {container} is not valid for pod {meta['name']}")
    statuses = {s.get("name"): s for s in (pod.get("status") or {}).get("containerStatuses") or []}
    status = statuses.get(container) or {}
    state = status.get("state") or {}
    last = (status.get("lastState") or {}).get("terminated") or {}
    if previous:
        if not last.get("containerID"):
            raise err.bad_request(
                f'previous terminated container "{container}" in pod "{meta["name"]}" not found'
            )
        return str(last["containerID"])
    for key in ("running", "terminated"):
        if key in state and status.get("containerID"):
            return str(status["containerID"])
    if last.get("containerID"):
        return str(last["containerID"])
    reason = (state.get("waiting") or {}).get("reason", "ContainerCreating")
    raise err.bad_request(
        f'container "{container}" in pod "{meta["name"]}" is waiting to start: {reason}'
    )


def banner(pod: dict[str, Any], container: str | None) -> str:
    """The log line of a container that runs nothing (no simulated program)."""
    meta = pod["metadata"]
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    name = container or containers[0].get("name", "")
    return (
        f"[kube emulator] container {name} of pod {meta.get('namespace')}/{meta['name']} "
        "is emulated (development stand-in): no process runs, so there is no output.\n"
    )


class EmulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], ctx: ServerContext) -> None:
        self.ctx = ctx
        super().__init__(address, Handler)

    def close_connections(self) -> None:
        with self.ctx.lock:
            connections = list(self.ctx.connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
