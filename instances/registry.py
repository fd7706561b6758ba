"""The operator's image registry (IMAGE_REGISTRY), as much of the OCI distribution API as the
platform needs: deleting a saved image's manifest. Plain HTTP(S) with `requests` (no official
Python client exists), HTTPS unless IMAGE_REGISTRY_INSECURE; IMAGE_REGISTRY_USERNAME/PASSWORD
sent as Basic auth, or exchanged for a bearer token when the registry answers 401 with
`WWW-Authenticate: Bearer realm=…,service=…` (the distribution token flow). Only the worker
calls it (instances.tasks.delete_image_manifest), never the web tier."""

import enum
import logging
import re

import requests
from django.conf import settings

logger = logging.getLogger(__name__)
TIMEOUT_S = 30
MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
    ]
)
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


class RegistryError(Exception):
    """The registry could not be reached or answered an error: try again later."""


class Deleted(enum.StrEnum):
    DELETED = "deleted"
    ABSENT = "absent"  # nothing by that name (deleted before): done
    UNSUPPORTED = "unsupported"  # the registry refuses deletes (405, UNSUPPORTED)


def _split(reference: str) -> tuple[str, str, str]:
    """(host, repository, tag or digest) of a reference in IMAGE_REGISTRY."""
    name, at, digest = reference.partition("@")
    host, _slash, path = name.partition("/")
    repository, colon, tag = path.rpartition(":")
    if not colon:
        repository, tag = path, "latest"
    return host, repository, digest if at else tag


class _Session:
    """One registry's requests, authenticated as the registry asks."""

    def __init__(self, host: str, repository: str) -> None:
        scheme = "http" if settings.IMAGE_REGISTRY_INSECURE else "https"
        self.base = f"{scheme}://{host}"
        self.repository = repository
        self.http = requests.Session()
        self.credentials: tuple[str, str] | None = None
        if settings.IMAGE_REGISTRY_USERNAME:
            self.credentials = (
                settings.IMAGE_REGISTRY_USERNAME,
                settings.IMAGE_REGISTRY_PASSWORD,
            )
            self.http.auth = self.credentials

    def request(
        self, method: str, path: str, headers: dict[str, str] | None = None
    ) -> requests.Response:
        answer = self._send(method, path, headers)
        challenge = answer.headers.get("WWW-Authenticate", "")
        if answer.status_code == 401 and challenge.lower().startswith("bearer "):
            self._token(challenge)
            answer = self._send(method, path, headers)
        return answer

    def _send(self, method: str, path: str, headers: dict[str, str] | None) -> requests.Response:
        url = f"{self.base}{path}"
        try:
            return self.http.request(method, url, headers=headers, timeout=TIMEOUT_S)
        except requests.RequestException as error:
            raise RegistryError(f"{method} {self.base}{path}: {error}") from error

    def _token(self, challenge: str) -> None:
        """The token flow: the realm's token for this repository's pull and delete."""
        fields = dict(_CHALLENGE.findall(challenge))
        realm = fields.get("realm")
        if not realm:
            raise RegistryError(f"{self.base}: a bearer challenge without a realm")
        params = {"scope": f"repository:{self.repository}:pull,delete"}
        if fields.get("service"):
            params["service"] = fields["service"]
        try:
            answer = requests.get(realm, params=params, auth=self.credentials, timeout=TIMEOUT_S)
        except requests.RequestException as error:
            raise RegistryError(f"token from {realm}: {error}") from error
        if answer.status_code != 200:
            raise RegistryError(f"token from {realm}: {answer.status_code}")
        body = answer.json()
        token = body.get("token") or body.get("access_token")
        if not token:
            raise RegistryError(f"token from {realm}: none in the answer")
        self.http.auth = None
        self.http.headers["Authorization"] = f"Bearer {token}"


def _refuses_deletes(answer: requests.Response) -> bool:
    if answer.status_code == 405:
        return True
    try:
        errors = answer.json().get("errors") or []
    except ValueError:
        return False
    return any(error.get("code") == "UNSUPPORTED" for error in errors)


def manifest_delete(reference: str) -> Deleted:
    """Delete the manifest `reference` names (its tag resolved to its digest first, as the API
    deletes by digest): deleted, absent (404: done before) or unsupported (405/UNSUPPORTED:
    the registry keeps it). Idempotent; raises RegistryError on anything else."""
    host, repository, tag = _split(reference)
    session = _Session(host, repository)
    digest = tag
    if not tag.startswith("sha256:"):
        found = session.request(
            "HEAD", f"/v2/{repository}/manifests/{tag}", headers={"Accept": MANIFEST_TYPES}
        )
        if found.status_code == 404:
            return Deleted.ABSENT
        digest = found.headers.get("Docker-Content-Digest", "")
        if found.status_code != 200 or not digest:
            raise RegistryError(f"HEAD {reference}: {found.status_code}")
    answer = session.request("DELETE", f"/v2/{repository}/manifests/{digest}")
    if answer.status_code in (200, 202):
        return Deleted.DELETED
    if answer.status_code == 404:
        return Deleted.ABSENT
    if _refuses_deletes(answer):
        return Deleted.UNSUPPORTED
    raise RegistryError(f"DELETE {reference}: {answer.status_code} {answer.text[:300]}")
