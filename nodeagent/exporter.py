"""The node's GPU metrics for Prometheus, under dcgm-exporter's names and labels, so that
dashboards and alerts written for dcgm-exporter work on a Starverse node unchanged.

Each sample the agent takes (and reports to the platform) is also kept here and served at
`GET /metrics` on `--metrics-port` (dcgm-exporter's 9400 in the DaemonSet): one gauge per field
per GPU, labelled `gpu` (index), `UUID`, `device` (nvidiaN), `modelName`, `Hostname`, and
`pod`, `namespace`, `container` of the pod holding the GPU where the source knows it (the
simulated source does; NVML alone does not, and dcgm-exporter without the kubelet's
pod-resources socket leaves them empty the same way). A field the GPU does not support has no
sample, as in dcgm-exporter. Standard library only, like the rest of the agent: the text
format is written here."""

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from nodeagent.metrics import METRICS
from nodeagent.source import GpuInfo, PodRef, Snapshot

log = logging.getLogger(__name__)

LABELS = ("gpu", "UUID", "device", "modelName", "Hostname", "container", "namespace", "pod")


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class GpuCollector:
    """The latest sample of this node's GPUs as DCGM gauges."""

    def __init__(self, hostname: str) -> None:
        self.hostname = hostname
        self._lock = threading.Lock()
        self._inventory: dict[int, GpuInfo] = {}
        self._snapshot: Snapshot | None = None
        self._pods: dict[int, PodRef] = {}

    def update(
        self, inventory: list[GpuInfo], snapshot: Snapshot, pods: dict[int, PodRef] | None = None
    ) -> None:
        with self._lock:
            self._inventory = {gpu["index"]: gpu for gpu in inventory}
            self._snapshot = snapshot
            self._pods = dict(pods or {})

    def exposition(self) -> bytes:
        """Prometheus's text format (0.0.4): every field's HELP and TYPE, then a line per GPU."""
        with self._lock:
            snapshot, inventory, pods = self._snapshot, self._inventory, self._pods
        samples: dict[str, list[str]] = {metric.name: [] for metric in METRICS}
        for gpu in snapshot["gpus"] if snapshot else []:
            info = inventory.get(gpu["index"])
            namespace, pod, container = pods.get(gpu["index"], PodRef("", "", ""))
            values = (
                str(gpu["index"]),
                gpu["uuid"],
                f"nvidia{gpu['index']}",
                info["product"] if info else "",
                self.hostname,
                container,
                namespace,
                pod,
            )
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in zip(LABELS, values, strict=True))
            for name, value in gpu["metrics"].items():
                if value is not None and name in samples:
                    samples[name].append(f"{name}{{{labels}}} {float(value)!r}")
        lines = []
        for metric in METRICS:
            help_text = f"{metric.description} ({metric.unit})."
            lines.append(f"# HELP {metric.name} {help_text.replace(chr(92), chr(92) * 2)}")
            lines.append(f"# TYPE {metric.name} gauge")
            lines.extend(samples[metric.name])
        return ("\n".join(lines) + "\n").encode()


class _Handler(BaseHTTPRequestHandler):
    collector: GpuCollector

    def do_GET(self) -> None:
        if self.path.split("?")[0] != "/metrics":
            self.send_error(404)
            return
        body = self.collector.exposition()
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return  # scrapes every 15-30 s would drown the agent's own log


def serve(collector: GpuCollector, port: int, host: str = "") -> ThreadingHTTPServer:
    """Serve /metrics in a daemon thread (on every address by default: Prometheus scrapes the
    pod's IP); returns the server (its port, shutdown())."""
    handler = type("Handler", (_Handler,), {"collector": collector})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    log.info("serving GPU metrics (DCGM names) on port %d", server.server_address[1])
    return server
