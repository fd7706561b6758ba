"""A real OCI registry for tests: Debian's `docker-registry` (the distribution project's
registry, as `make run` starts it) on a free port with its storage in a temporary directory
and deletes enabled; read back over its HTTP API. A machine without it fails the tests that
need it (README "Set up": `apt-get install docker-registry`), it never skips them."""

from __future__ import annotations

import gzip
import io
import json
import shutil
import socket
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
import requests

PROGRAM = "docker-registry"
ACCEPT = "application/vnd.oci.image.manifest.v1+json"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class DockerRegistry:
    """One `docker-registry serve` process and what its API says."""

    def __init__(self, root: Path, *, deletes: bool = True) -> None:
        program = shutil.which(PROGRAM)
        if program is None:
            pytest.fail(
                f"{PROGRAM} is not installed: `apt-get install docker-registry` (Debian's "
                "distribution registry; README, Set up)"
            )
        self.port = _free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.host}"
        (root / "data").mkdir(parents=True, exist_ok=True)
        config = root / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log: {level: warn}\n"
            f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}, "
            f"delete: {{enabled: {'true' if deletes else 'false'}}}}}\n"
            f'http: {{addr: "{self.host}"}}\n'
        )
        self.log = (root / "registry.log").open("wb")
        self.process = subprocess.Popen(
            [program, "serve", str(config)], stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                if requests.get(f"{self.url}/v2/", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"{PROGRAM} did not start: {(root / 'registry.log').read_text()}")
            time.sleep(0.05)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()

    def get(self, path: str, **headers: str) -> requests.Response:
        return requests.get(f"{self.url}{path}", headers=headers, timeout=10)

    def catalog(self) -> list[str]:
        return list(self.get("/v2/_catalog").json()["repositories"])

    def tags(self, repository: str) -> list[str]:
        return list(self.get(f"/v2/{repository}/tags/list").json().get("tags") or [])

    def manifest(self, repository: str, tag: str) -> requests.Response:
        return self.get(f"/v2/{repository}/manifests/{tag}", Accept=ACCEPT)

    def blob(self, repository: str, digest: str) -> bytes:
        answer = self.get(f"/v2/{repository}/blobs/{digest}")
        assert answer.status_code == 200, answer.text
        return answer.content

    def config(self, repository: str, manifest: dict[str, Any]) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.blob(repository, manifest["config"]["digest"]))
        return loaded

    def layer_files(self, repository: str, digest: str) -> dict[str, bytes]:
        """A layer blob read as what it is: a gzip'd tar; its regular files' names and bytes."""
        with tarfile.open(
            fileobj=io.BytesIO(gzip.decompress(self.blob(repository, digest)))
        ) as tar:
            return {
                member.name: (tar.extractfile(member) or io.BytesIO()).read()
                for member in tar.getmembers()
                if member.isfile()
            }
