"""Tenants' own images: brought by reference (any OCI reference from a registry the operator
allows, with optional registry credentials kept only as the tenant namespace's pull Secret),
and deleted. The catalogue's images are the operator's (the admin); a tenant's image is
ordered like one of them but only by its own tenant (compute.models.ImageQuerySet.usable_by)."""

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from compute.choices import ImageStatus
from compute.models import Image
from compute.selectors import image_locked
from instances.choices import InstanceStatus as S
from instances.models import Instance
from starverse.accounts.models import User
from starverse.core import kube
from starverse.core.errors import Conflict, FieldInvalid
from starverse.core.ids import new_id

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REFERENCE = re.compile(
    rf"^(?P<name>(?:(?P<host>[A-Za-z0-9.-]+(?::[0-9]+)?)/)?{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)
DOCKER_HUB = "docker.io"
_DOCKER_HUB_AUTH = "https://index.docker.io/v1/"


@dataclass(frozen=True)
class Reference:
    """An OCI image reference, checked: its registry host and the reference as given."""

    registry: str
    text: str


def reference_parse(text: str) -> Reference:
    """`registry/repo:tag` or `…@sha256:<64 hex>` (Docker Hub when the first part names no
    host), from a registry the operator allows (IMAGE_ALLOWED_REGISTRIES); 400 otherwise."""
    text = text.strip()
    found = REFERENCE.match(text)
    if found is None or not (found.group("tag") or found.group("digest")):
        raise FieldInvalid(
            "reference",
            _(
                "Not an image reference: give registry/repository:tag or "
                "registry/repository@sha256:<digest>, e.g. docker.io/pytorch/pytorch:2.3.1-cuda12.1"
                "-cudnn8-runtime."
            ),
            code="invalid_reference",
        )
    host = found.group("host") or ""
    first = found.group("name").split("/", 1)[0]
    registry = host if host and ("." in first or ":" in first or first == "localhost") else ""
    registry = registry or DOCKER_HUB
    allowed = settings.IMAGE_ALLOWED_REGISTRIES
    if "*" not in allowed and registry not in allowed:
        raise FieldInvalid(
            "reference",
            _("Images from %(registry)s are not allowed here; allowed registries: %(allowed)s.")
            % {"registry": registry, "allowed": ", ".join(allowed)},
            code="registry_not_allowed",
        )
    return Reference(registry, text)


def pull_secret(image: Image, registry: str, username: str, password: str) -> dict[str, Any]:
    """The tenant namespace's pull Secret for one image (kubernetes.io/dockerconfigjson)."""
    auth = base64.b64encode(f"{username}:{password}".encode()).decode()
    server = _DOCKER_HUB_AUTH if registry == DOCKER_HUB else registry
    config = {"auths": {server: {"username": username, "password": password, "auth": auth}}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/dockerconfigjson",
        "metadata": {
            "name": image.pull_secret,
            "namespace": kube.namespace_name(str(image.tenant_id)),
            "labels": {
                **kube.MANAGED,
                "starverse.io/tenant": kube.tenant_label(str(image.tenant_id)),
            },
        },
        "stringData": {".dockerconfigjson": json.dumps(config)},
    }


def image_import(
    *, user: User, name: str, reference: str, credentials: dict[str, str] | None = None
) -> Image:
    """A tenant's image by reference (bring your own), ready to order at once: whether it pulls
    is the cluster's to say, in the instance's timeline. Credentials become the tenant
    namespace's pull Secret and are never stored or shown by the platform."""
    checked = reference_parse(reference)
    image = Image(
        id=new_id("img"),
        name=name.strip(),
        description="",
        container_image=checked.text,
        tenant_id=user.tenant_id,
        created_by=user,
        status=ImageStatus.READY,
    )
    if credentials:
        image.pull_secret = f"pull-{image.id.split('_', 1)[1].lower()}"
    try:
        with transaction.atomic():
            image.save(force_insert=True)
    except IntegrityError:
        raise Conflict(
            _("You already have an image named %(name)s.") % {"name": image.name},
            code="image_name_taken",
        ) from None
    if credentials:
        kube.tenant_namespace_ensure(str(user.tenant_id))
        secret = pull_secret(image, checked.registry, **credentials)
        kube.ensure(secret, update=True)
    return image


def image_delete(*, image: Image) -> None:
    """Delete a tenant's image (and its pull Secret): no longer listed or orderable; refused
    (409) while an instance that is not terminated (it may start again) was ordered from it."""
    with transaction.atomic():
        locked = image_locked(image.pk)
        if Instance.objects.filter(image_id=locked.pk).exclude(status=S.TERMINATED).exists():
            raise Conflict(
                _(
                    "Instances still use this image: terminate them first, then delete it "
                    "(a stopped one would start from it again)."
                ),
                code="image_in_use",
            )
        locked.active = False
        locked.deleted_at = timezone.now()
        locked.save(update_fields=["active", "deleted_at"])
    if locked.pull_secret:
        kube.delete("Secret", kube.namespace_name(str(locked.tenant_id)), locked.pull_secret)
