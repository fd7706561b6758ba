"""Container images on the emulated nodes of the Kubernetes API emulator (a development
stand-in): how big each image is, how fast each node pulls, the pulls in flight, and what a node
holds, reported in ``Node.status.images`` as a kubelet reports it.

A real registry knows every image's size; the emulator is told them (``ImageCatalog``: a table of
reference → bytes, given at start or set later, and a default for images it was not told of).
A pull takes size ÷ the node's bandwidth (``NodeSpec.pull_bandwidth_mbps``, or the annotation
``BANDWIDTH_ANNOTATION`` on the Node, else the emulator's default). A node pulls one image at a
time (the kubelet's default ``serializeImagePulls``), so pulls queue behind each other, and two
pods that need the same image on one node share one pull.

A saved image (:mod:`.saving`) is recorded here as its base's layers plus its own; when the
emulator is given a real registry (``registry_url``), it is pushed there too (:mod:`.oci`), while
the sizes and pulls stay the model's.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
DEFAULT_BANDWIDTH_MBPS = 800.0  # MB/s (10^6 bytes) a node pulls at when nothing says otherwise
BANDWIDTH_ANNOTATION = "emulator.starverse.io/pull-bandwidth-mbps"
MAX_REPORTED_IMAGES = 50  # the kubelet's nodeStatusMaxImages


def normalize(reference: str) -> str:
    """A reference as containerd names it: registry and ``library/`` filled in, ``:latest`` when
    it names neither tag nor digest (``busybox`` → ``docker.io/library/busybox:latest``)."""
    name, at, digest = reference.partition("@")
    first, slash, _rest = name.partition("/")
    if not slash:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    if at:
        return f"{name}@{digest}"
    if ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name


def digest_name(reference: str) -> str:
    """The repository@sha256 name a kubelet lists beside the tag (the emulator's digest is a
    hash of the normalized reference: stable, not a real manifest digest)."""
    normalized = normalize(reference)
    if "@" in normalized:
        return normalized
    repository = normalized.rsplit(":", 1)[0]
    return f"{repository}@sha256:{hashlib.sha256(normalized.encode()).hexdigest()}"


@dataclass
class ImageCatalog:
    """What the emulated registry knows: image sizes in bytes, by normalized reference."""

    sizes: dict[str, int] = field(default_factory=dict)
    default_bytes: int = 0
    bandwidth_mbps: float = DEFAULT_BANDWIDTH_MBPS
    # MB/s a push to the registry goes at (a saved image's layer); None: ``bandwidth_mbps``
    registry_bandwidth_mbps: float | None = None
    # pushed images' layers' sizes (the base's as one layer, then each pushed on top of it)
    layers: dict[str, list[int]] = field(default_factory=dict)
    # a real registry saved images are pushed to as well (``http://host:port``, :mod:`.oci`);
    # None: the model only
    registry_url: str | None = None

    def __post_init__(self) -> None:
        self.sizes = {normalize(ref): int(size) for ref, size in self.sizes.items()}
        self._configured = dict(self.sizes)
        self._configured_registry_mbps = self.registry_bandwidth_mbps
        self._configured_registry_url = self.registry_url

    def reset(self) -> None:
        """Back to the sizes given at start (a test's ``set_size`` and pushes are forgotten)."""
        self.sizes = dict(self._configured)
        self.registry_bandwidth_mbps = self._configured_registry_mbps
        self.registry_url = self._configured_registry_url
        self.layers.clear()

    @property
    def push_mbps(self) -> float:
        return self.registry_bandwidth_mbps or self.bandwidth_mbps

    def push(self, reference: str, base: str, layer_bytes: int) -> int:
        """Record ``reference`` as ``base``'s layers plus one of ``layer_bytes``: its size, which
        a node that pulls it takes size ÷ bandwidth for, is returned."""
        layers = [*self.layers.get(normalize(base), [self.size(base)]), int(layer_bytes)]
        self.layers[normalize(reference)] = layers
        self.sizes[normalize(reference)] = sum(layers)
        return sum(layers)

    def set_size(self, reference: str, size_bytes: int) -> None:
        self.sizes[normalize(reference)] = int(size_bytes)

    def size(self, reference: str) -> int:
        return self.sizes.get(normalize(reference), self.default_bytes)


def node_bandwidth_mbps(node: Obj, default: float) -> float:
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(BANDWIDTH_ANNOTATION)
    try:
        value = float(raw) if raw is not None else default
    except ValueError:
        value = default
    return value if value > 0 else default


def holds(node: Obj, reference: str) -> bool:
    """Whether the node's status lists the image (by its tag or its digest name)."""
    wanted = normalize(reference)
    return any(
        wanted in (entry.get("names") or [])
        for entry in (node.get("status") or {}).get("images") or []
    )


def add_image(node: Obj, reference: str, size_bytes: int) -> None:
    """List the image in the node's ``status.images`` (largest first, at most 50, as a kubelet
    does); a mutate callback."""
    if holds(node, reference):
        return
    images = [*(node.setdefault("status", {}).get("images") or [])]
    images.append(
        {"names": [normalize(reference), digest_name(reference)], "sizeBytes": size_bytes}
    )
    images.sort(key=lambda entry: (-int(entry.get("sizeBytes") or 0), entry["names"][0]))
    node["status"]["images"] = images[:MAX_REPORTED_IMAGES]


@dataclass
class Pull:
    began: float
    ends: float
    size_bytes: int


class Pulls:
    """The pulls in flight, per node one after another; the same image on one node is pulled
    once however many pods wait for it."""

    def __init__(self) -> None:
        self.in_flight: dict[tuple[str, str], Pull] = {}
        self._busy_until: dict[str, float] = {}

    def reset(self) -> None:
        self.in_flight.clear()
        self._busy_until.clear()

    def pull(self, node: str, reference: str, size_bytes: int, mbps: float, now: float) -> Pull:
        key = (node, normalize(reference))
        current = self.in_flight.get(key)
        if current is not None:
            return current
        began = max(now, self._busy_until.get(node, now))
        pull = Pull(began, began + size_bytes / (mbps * 1e6), size_bytes)
        self._busy_until[node] = pull.ends
        self.in_flight[key] = pull
        return pull

    def finished(self, now: float) -> list[tuple[str, str, int]]:
        """(node, reference, bytes) of the pulls done by `now`, forgotten as they are returned."""
        done = [(key, p) for key, p in self.in_flight.items() if p.ends <= now]
        for key, _pull in done:
            del self.in_flight[key]
        return [(node, ref, p.size_bytes) for (node, ref), p in done]
