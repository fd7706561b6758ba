"""Saved images really in the operator's registry: on the kube emulator told of a real Debian
docker-registry (as `make run` runs it), saving an instance puts `t-<tenant>/<name>:<tag>` in
that registry, a gzip'd tar layer of the files the tenant changed; another tenant's images are
in a repository of their own; deleting the image deletes its manifest there (a worker's task,
idempotent), and a registry that refuses deletes still lets the tenant delete it, the
operator's log saying so once. The registry client's authentication (Basic, the token flow) is
tried against a small registry stand-in that asks for it (instances/registry.py)."""

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from compute.models import Image
from instances import images, registry
from instances.models import Instance
from instances.registry import Deleted, RegistryError
from starverse.core import kube
from tests.factories import fund, make_user
from tests.instances.test_saved_images import CONTENT, PACKAGE, _installed, _saved
from tests.registry import DockerRegistry


def _point_at(settings: Any, cluster: Any, docker_registry: DockerRegistry) -> None:
    """The platform and the emulator's `crane append` pointed at the real registry."""
    settings.IMAGE_REGISTRY = docker_registry.host
    settings.IMAGE_REGISTRY_INSECURE = True
    cluster.set_registry(docker_registry.url)


def _save(client: Any, instance: Instance, name: str) -> Image:
    answer = client.post(f"/api/v1/instances/{instance.id}/image", {"name": name}, format="json")
    assert answer.status_code == 202, answer.content
    image = _saved(answer.json()["id"])
    assert image.status == "ready", image.error_message
    return image


def _where(image: Image, host: str) -> tuple[str, str]:
    repository, tag = image.container_image.removeprefix(f"{host}/").rsplit(":", 1)
    return repository, tag


def test_a_saved_image_is_listed_by_the_registry_with_the_changed_files_and_deleted_there(
    renter,
    catalog,
    cluster,
    docker_registry,
    settings,
    client_for,
    django_capture_on_commit_callbacks,
):
    _point_at(settings, cluster, docker_registry)
    user, client = renter

    image = _save(client, _installed(cluster, client, catalog), "My env")

    repository, tag = _where(image, docker_registry.host)
    assert repository == f"t-{kube.tenant_label(user.tenant_id)}/my-env"
    assert repository in docker_registry.catalog()
    assert docker_registry.tags(repository) == [tag]
    manifest = docker_registry.manifest(repository, tag).json()
    assert manifest["annotations"]["org.opencontainers.image.base.name"] == (
        catalog["image"].container_image
    )
    [layer] = manifest["layers"]
    assert docker_registry.layer_files(repository, layer["digest"]) == {
        PACKAGE.lstrip("/"): CONTENT.encode()
    }
    # another tenant's saved image: a repository of its own, the first one's tags unchanged
    stranger = make_user()
    fund(stranger, 100_000)
    theirs = client_for(stranger)
    other = _save(theirs, _installed(cluster, theirs, catalog), "My env")
    other_repository, other_tag = _where(other, docker_registry.host)
    assert other_repository == f"t-{kube.tenant_label(stranger.tenant_id)}/my-env"
    assert other_repository != repository
    assert docker_registry.tags(repository) == [tag]
    assert docker_registry.tags(other_repository) == [other_tag]
    # the stranger cannot delete the first tenant's image, here or in the registry
    assert theirs.delete(f"/api/v1/images/{image.id}").status_code == 404
    assert docker_registry.manifest(repository, tag).status_code == 200

    with django_capture_on_commit_callbacks(execute=True) as sent:
        assert client.delete(f"/api/v1/images/{image.id}").status_code == 204

    assert len(sent) == 1  # the worker's task, sent once the deletion committed
    assert docker_registry.manifest(repository, tag).status_code == 404
    assert docker_registry.manifest(other_repository, other_tag).status_code == 200
    # the task again (a retry, a redelivery): nothing left to delete, done
    assert images.image_manifest_delete(image.id) == Deleted.ABSENT


def test_a_registry_that_refuses_deletes_keeps_the_manifest_and_the_log_says_so_once(
    renter, catalog, cluster, settings, tmp_path, caplog, django_capture_on_commit_callbacks
):
    refusing = DockerRegistry(tmp_path, deletes=False)
    try:
        _point_at(settings, cluster, refusing)
        _user, client = renter
        instance = _installed(cluster, client, catalog)
        first, second = _save(client, instance, "one"), _save(client, instance, "two")

        with caplog.at_level("INFO", logger="instances.images"):
            for image in (first, second):
                with django_capture_on_commit_callbacks(execute=True):
                    assert client.delete(f"/api/v1/images/{image.id}").status_code == 204
                assert client.get(f"/api/v1/images/{image.id}").status_code == 404

        for image in (first, second):
            assert refusing.manifest(*_where(image, refusing.host)).status_code == 200
        warnings = [r for r in caplog.records if "registry_refuses_deletes" in r.getMessage()]
        assert len(warnings) == 1 and warnings[0].levelname == "WARNING"
        outcomes = [r.getMessage() for r in caplog.records if "manifest_deleted" in r.getMessage()]
        assert len(outcomes) == 2 and all("outcome=unsupported" in o for o in outcomes)
    finally:
        refusing.stop()


class _StandIn(BaseHTTPRequestHandler):
    """A registry that asks for credentials: Basic, or the token flow (a 401 with a Bearer
    challenge naming its token endpoint, which takes Basic credentials)."""

    server: "_Server"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, status: int, body: dict[str, Any] | None = None, **headers: str) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _allowed(self) -> bool:
        given = self.headers.get("Authorization", "")
        basic = "Basic " + base64.b64encode(b"pusher:p4ss").decode()
        if self.server.mode == "basic":
            return given == basic
        return given == "Bearer tok-1"

    def _manifests(self) -> None:
        self.server.seen.append((self.command, self.path, self.headers.get("Authorization")))
        if self.server.mode == "broken":
            return self._answer(503, {"errors": [{"code": "UNAVAILABLE"}]})
        if not self._allowed():
            if self.server.mode == "basic":
                return self._answer(401, WWW_Authenticate='Basic realm="stand-in"')
            realm = f"http://127.0.0.1:{self.server.server_port}/token"
            challenge = f'Bearer realm="{realm}",service="stand-in"'
            return self._answer(401, WWW_Authenticate=challenge)
        repository, _sep, reference = self.path.removeprefix("/v2/").partition("/manifests/")
        digest = self.server.manifests.get((repository, reference))
        if self.command == "HEAD" and digest:
            return self._answer(200, Docker_Content_Digest=digest)
        if self.command == "DELETE" and reference in self.server.manifests.values():
            self.server.manifests = {
                k: v for k, v in self.server.manifests.items() if v != reference
            }
            return self._answer(202)
        return self._answer(404, {"errors": [{"code": "MANIFEST_UNKNOWN"}]})

    do_HEAD = do_DELETE = _manifests

    def do_GET(self) -> None:  # the token endpoint
        self.server.seen.append((self.command, self.path, self.headers.get("Authorization")))
        basic = "Basic " + base64.b64encode(b"pusher:p4ss").decode()
        if self.path.startswith("/token") and self.headers.get("Authorization") == basic:
            return self._answer(200, {"token": "tok-1"})
        return self._answer(401)


class _Server(ThreadingHTTPServer):
    mode = "bearer"
    manifests: dict[tuple[str, str], str]
    seen: list[tuple[str, str, str | None]]


@pytest.fixture
def stand_in(settings) -> Iterator[_Server]:
    server = _Server(("127.0.0.1", 0), _StandIn)
    server.manifests = {("t-abc/env", "tag1"): "sha256:" + "a" * 64}
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.IMAGE_REGISTRY = f"127.0.0.1:{server.server_port}"
    settings.IMAGE_REGISTRY_INSECURE = True
    settings.IMAGE_REGISTRY_USERNAME, settings.IMAGE_REGISTRY_PASSWORD = "pusher", "p4ss"
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("mode", ["bearer", "basic"])
def test_the_registry_client_authenticates_as_the_registry_asks(stand_in, settings, mode):
    stand_in.mode = mode
    reference = f"{settings.IMAGE_REGISTRY}/t-abc/env:tag1"

    assert registry.manifest_delete(reference) == Deleted.DELETED
    assert registry.manifest_delete(reference) == Deleted.ABSENT

    assert stand_in.manifests == {}
    delete = [s for s in stand_in.seen if s[0] == "DELETE"][-1]
    assert delete[1] == "/v2/t-abc/env/manifests/sha256:" + "a" * 64
    if mode == "bearer":
        assert delete[2] == "Bearer tok-1"
        [token] = {s[1] for s in stand_in.seen if s[1].startswith("/token")}
        assert "scope=repository%3At-abc%2Fenv%3Apull%2Cdelete" in token
        assert "service=stand-in" in token
    else:
        assert delete[2].startswith("Basic ")


def test_a_registry_in_trouble_is_an_error_to_retry(stand_in, settings):
    stand_in.mode = "broken"
    with pytest.raises(RegistryError):
        registry.manifest_delete(f"{settings.IMAGE_REGISTRY}/t-abc/env:tag1")
    settings.IMAGE_REGISTRY = "127.0.0.1:1"  # nothing listens
    with pytest.raises(RegistryError):
        registry.manifest_delete("127.0.0.1:1/t-abc/env:tag1")
