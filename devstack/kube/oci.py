"""The kube emulator's ``crane append`` against a real OCI registry (a development stand-in for
go-containerregistry's ``crane``, speaking the OCI distribution API over plain HTTP with the
standard library): the layer directory the emulated layer step left becomes a real gzip'd tar
(whiteouts as ``.wh.<name>`` entries, as the directory already holds them), uploaded as a blob
(``POST …/blobs/uploads/`` then ``PUT <location>?digest=``), with an image config
(``rootfs.diff_ids``, ``history``) and an OCI manifest
(``application/vnd.oci.image.manifest.v1+json``) put under the new tag.

The base's layers, honestly: a base in the same registry (a saved image saved again) has its
manifest and config read, its layers mounted into the new repository (``?mount=&from=``, not
re-uploaded) and its diff_ids and history kept, so the new image is complete and pullable from
the registry. A base elsewhere (the catalogue's ``nvcr.io/…``, Docker Hub) is not copied: this
machine reaches no other registry, so the manifest holds the new layer only and names the base
in the annotations ``org.opencontainers.image.base.name`` (and ``.base.digest`` when the
reference pins one), and its config's history says so. Such an image is listed by the registry
with its tag and its layer, but is not runnable from it alone; the emulator's registry model
(:class:`.images.ImageCatalog`) still records the base's layers and size for pulls.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import http.client
import io
import json
import os
import tarfile
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
BASE_NAME = "org.opencontainers.image.base.name"
BASE_DIGEST = "org.opencontainers.image.base.digest"
TIMEOUT_S = 60.0


class PushError(Exception):
    """The registry refused a step of the push (the message is the container's last line)."""


@dataclass(frozen=True)
class Target:
    """A reference split for the distribution API: host[:port], repository, tag or digest."""

    host: str
    repository: str
    tag: str

    @classmethod
    def parse(cls, reference: str) -> Target:
        name, at, digest = reference.partition("@")
        host, slash, path = name.partition("/")
        if not slash or not ("." in host or ":" in host or host == "localhost"):
            host, path = "docker.io", name if slash else f"library/{name}"
        repository, colon, tag = path.rpartition(":")
        if not colon:
            repository, tag = path, ""
        return cls(host, repository, digest if at else (tag or "latest"))


class _Hashing(io.RawIOBase):
    """A writable stream that hashes and counts what passes through to ``sink``."""

    def __init__(self, sink: IO[bytes] | io.BufferedIOBase) -> None:
        self.sink, self.sha, self.size = sink, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self.sha.update(chunk)
        self.size += len(chunk)
        self.sink.write(chunk)
        return len(chunk)

    @property
    def digest(self) -> str:
        return f"sha256:{self.sha.hexdigest()}"


@dataclass(frozen=True)
class Layer:
    """A gzip'd tar in a temporary file: its blob digest and size, and its diff_id."""

    path: Path
    digest: str
    size: int
    diff_id: str


def layer_tar(directory: Path, into: Path) -> Layer:
    """The directory as one OCI layer (a tar of its tree, entries sorted, owners and modes
    kept, whiteout files as they are), gzip'd into ``into``; digests computed while written."""
    with into.open("wb") as raw:
        compressed = _Hashing(raw)
        with gzip.GzipFile(fileobj=compressed, mode="wb", mtime=0) as zipped:
            plain = _Hashing(zipped)
            with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                for path in sorted(_tree(directory)):
                    tar.add(path, arcname=path.relative_to(directory).as_posix(), recursive=False)
    return Layer(into, compressed.digest, compressed.size, plain.digest)


def _tree(directory: Path) -> list[Path]:
    found: list[Path] = []
    for here, dirs, names in os.walk(directory):
        found += [Path(here) / d for d in dirs] + [Path(here) / n for n in names]
    return found


class Registry:
    """A registry's distribution API at ``url`` (``http://host:port``), without auth (the
    development registry ``make run`` starts)."""

    def __init__(self, url: str) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.url = url.rstrip("/")
        self.scheme = parsed.scheme or "http"
        self.host = parsed.netloc

    def serves(self, host: str) -> bool:
        return host == self.host

    def _request(
        self,
        method: str,
        path: str,
        body: bytes | IO[bytes] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        connection_type = (
            http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        )
        connection = connection_type(self.host, timeout=TIMEOUT_S)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            answer = connection.getresponse()
            return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
        except OSError as error:
            raise PushError(f"{method} {self.url}{path}: {error}") from error
        finally:
            connection.close()

    def _expect(
        self, method: str, path: str, statuses: tuple[int, ...], **kwargs: Any
    ) -> tuple[int, dict[str, str], bytes]:
        status, headers, body = self._request(method, path, **kwargs)
        if status not in statuses:
            raise PushError(f"{method} {path}: {status} {body.decode(errors='replace')[:300]}")
        return status, headers, body

    def has_blob(self, repository: str, digest: str) -> bool:
        status, _headers, _body = self._request("HEAD", f"/v2/{repository}/blobs/{digest}")
        return status == 200

    def _location(self, headers: dict[str, str]) -> str:
        location = urllib.parse.urlsplit(headers.get("location", ""))
        return f"{location.path}?{location.query}" if location.query else location.path

    def upload(self, repository: str, digest: str, size: int, body: bytes | IO[bytes]) -> None:
        """A blob, monolithically (POST for a session, PUT with its digest); none when the
        repository holds it already."""
        if self.has_blob(repository, digest):
            return
        _s, headers, _b = self._expect("POST", f"/v2/{repository}/blobs/uploads/", (202,))
        self._finish(headers, digest, body, {"Content-Length": str(size)})

    def _finish(
        self, headers: dict[str, str], digest: str, body: bytes | IO[bytes], more: dict[str, str]
    ) -> None:
        """An upload session (its POST's answer) ended by a PUT of the whole blob and its
        digest."""
        location = self._location(headers)
        joiner = "&" if "?" in location else "?"
        self._expect(
            "PUT",
            f"{location}{joiner}digest={urllib.parse.quote(digest)}",
            (201,),
            body=body,
            headers={"Content-Type": "application/octet-stream", **more},
        )

    def mount(self, repository: str, digest: str, source: str) -> None:
        """A blob of ``source`` made one of ``repository`` (cross-repository mount); the
        registry's 202 (no mount) is answered by copying it."""
        if self.has_blob(repository, digest):
            return
        query = urllib.parse.urlencode({"mount": digest, "from": source})
        status, headers, _b = self._expect(
            "POST", f"/v2/{repository}/blobs/uploads/?{query}", (201, 202)
        )
        if status == 201:
            return
        _s, _h, blob = self._expect("GET", f"/v2/{source}/blobs/{digest}", (200,))
        self._finish(headers, digest, blob, {})

    def manifest(self, repository: str, reference: str) -> tuple[dict[str, Any], str] | None:
        """A manifest and its digest, or None when the registry has none by that name."""
        status, headers, body = self._request(
            "GET",
            f"/v2/{repository}/manifests/{reference}",
            headers={"Accept": f"{OCI_MANIFEST}, {DOCKER_MANIFEST}"},
        )
        if status == 404:
            return None
        if status != 200:
            raise PushError(f"GET manifest {repository}:{reference}: {status}")
        digest = headers.get("docker-content-digest") or (
            f"sha256:{hashlib.sha256(body).hexdigest()}"
        )
        return json.loads(body), digest

    def blob_json(self, repository: str, digest: str) -> dict[str, Any]:
        _s, _h, body = self._expect("GET", f"/v2/{repository}/blobs/{digest}", (200,))
        loaded = json.loads(body)
        return loaded if isinstance(loaded, dict) else {}

    def put_manifest(self, repository: str, tag: str, manifest: dict[str, Any]) -> str:
        body = json.dumps(manifest, separators=(",", ":")).encode()
        _s, headers, _b = self._expect(
            "PUT",
            f"/v2/{repository}/manifests/{tag}",
            (201,),
            body=body,
            headers={"Content-Type": OCI_MANIFEST},
        )
        return headers.get("docker-content-digest") or f"sha256:{hashlib.sha256(body).hexdigest()}"


def _blob(data: bytes) -> tuple[str, int]:
    return f"sha256:{hashlib.sha256(data).hexdigest()}", len(data)


def append(registry: Registry, base: str, layer_dir: Path, target: str) -> str:
    """``crane append --base BASE --new_layer LAYER --new_tag TARGET`` against ``registry``:
    the digest of the manifest put (see the module's docstring for the base's layers)."""
    where = Target.parse(target)
    if not registry.serves(where.host):
        raise PushError(f"{target}: this emulator pushes to {registry.host} only")
    origin = Target.parse(base)
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    layers: list[dict[str, Any]] = []
    diff_ids: list[str] = []
    history: list[dict[str, Any]] = []
    config: dict[str, Any] = {"architecture": "amd64", "os": "linux", "config": {}}
    annotations: dict[str, str] = {}
    found = None
    if registry.serves(origin.host):
        found = registry.manifest(origin.repository, origin.tag)
    if found is not None:
        manifest, digest = found
        base_config = registry.blob_json(origin.repository, manifest["config"]["digest"])
        for layer in manifest.get("layers") or []:
            registry.mount(where.repository, layer["digest"], origin.repository)
            layers.append(layer)
        config |= {k: v for k, v in base_config.items() if k not in ("rootfs", "history")}
        diff_ids = list((base_config.get("rootfs") or {}).get("diff_ids") or [])
        history = list(base_config.get("history") or [])
    else:
        digest = origin.tag if origin.tag.startswith("sha256:") else ""
        history.append(
            {
                "created": now,
                "created_by": f"base {base} (its layers not copied into this registry)",
                "empty_layer": True,
            }
        )
    annotations[BASE_NAME] = base
    if digest:
        annotations[BASE_DIGEST] = digest
    with tempfile.TemporaryDirectory(prefix="crane-append-") as scratch:
        layer = layer_tar(layer_dir, Path(scratch) / "layer.tar.gz")
        with layer.path.open("rb") as body:
            registry.upload(where.repository, layer.digest, layer.size, body)
    layers.append({"mediaType": OCI_LAYER, "digest": layer.digest, "size": layer.size})
    diff_ids.append(layer.diff_id)
    history.append({"created": now, "created_by": "crane append (starverse save as image)"})
    config |= {"created": now, "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    config["history"] = history
    config_body = json.dumps(config, separators=(",", ":")).encode()
    config_digest, config_size = _blob(config_body)
    registry.upload(where.repository, config_digest, config_size, config_body)
    return registry.put_manifest(
        where.repository,
        where.tag,
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": config_size},
            "layers": layers,
            "annotations": annotations,
        },
    )
