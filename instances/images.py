"""Tenants' own images: brought by reference (any OCI reference from a registry the operator
allows, with optional registry credentials kept only as the tenant namespace's pull Secret),
saved from an instance (pushed by a build pod on the cluster: instances.provisioning.saving),
and deleted. The catalogue's images are the operator's (the admin); a tenant's image is
ordered like one of them but only by its own tenant (compute.models.ImageQuerySet.usable_by)."""

import base64
import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from compute.choices import ImageStatus
from compute.models import Image
from compute.selectors import image_locked
from instances import registry
from instances.choices import InstanceStatus as S
from instances.models import Instance, InstanceEvent
from instances.states import instance_locked
from starverse.accounts.models import User
from starverse.core import kube
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.errors import Conflict, FieldInvalid
from starverse.core.ids import new_id
from starverse.core.text import later

logger = logging.getLogger(__name__)
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


def registry_secret(
    name: str, tenant_id: str, registry: str, username: str, password: str
) -> dict[str, Any]:
    """A Secret of registry credentials in the tenant namespace (kubernetes.io/dockerconfigjson:
    what a kubelet pulls with, and what `crane` reads as its config.json)."""
    auth = base64.b64encode(f"{username}:{password}".encode()).decode()
    server = _DOCKER_HUB_AUTH if registry == DOCKER_HUB else registry
    config = {"auths": {server: {"username": username, "password": password, "auth": auth}}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/dockerconfigjson",
        "metadata": {
            "name": name,
            "namespace": kube.namespace_name(tenant_id),
            "labels": {**kube.MANAGED, "starverse.io/tenant": kube.tenant_label(tenant_id)},
        },
        "stringData": {".dockerconfigjson": json.dumps(config)},
    }


def pull_secret(image: Image, registry: str, username: str, password: str) -> dict[str, Any]:
    """The tenant namespace's pull Secret for one image."""
    return registry_secret(image.pull_secret, str(image.tenant_id), registry, username, password)


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
    if locked.saved_from:
        # the worker deletes its manifest from the operator's registry (a brought image is
        # another registry's, never deleted there)
        enqueue_on_commit("instances.tasks.delete_image_manifest", locked.id)


def image_manifest_delete(image_id: str) -> registry.Deleted | None:
    """A deleted saved image's manifest deleted from the operator's registry (its blobs are the
    registry's garbage collection's); idempotent, an absent manifest is done. A registry that
    refuses deletes keeps it: the image is deleted for the tenant all the same, and the
    operator's log says so once. RegistryError (unreachable, 5xx): the task tries again."""
    image = Image.objects.filter(pk=image_id, active=False, saved_from__gt="").first()
    if image is None or not image.container_image:
        return None
    outcome = registry.manifest_delete(image.container_image)
    logger.info(
        "image.manifest_deleted image=%s reference=%s outcome=%s",
        image.id,
        image.container_image,
        outcome,
    )
    if outcome == registry.Deleted.UNSUPPORTED and cache.add(
        f"registry-refuses-deletes:{settings.IMAGE_REGISTRY}", True, None
    ):
        logger.warning(
            "image.registry_refuses_deletes registry=%s reference=%s: deleted images stay in "
            "the registry; enable deletes (docker-registry: storage.delete.enabled) or remove "
            "t-* tags by hand (docs/operator-guide.md, Saved images)",
            settings.IMAGE_REGISTRY,
            image.container_image,
        )
    return outcome


def _repository(name: str) -> str:
    """A name as an OCI repository path component (lower case, `-` between words)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:64].strip("-") or "image"


def saved_reference(image: Image) -> str:
    """Where a saved image is pushed: the operator's registry, the tenant's own repository
    (`t-<tenant>`), a repository named after the image, tagged with its id."""
    tenant = kube.tenant_label(str(image.tenant_id))
    tag = image.id.split("_", 1)[1].lower()
    return f"{settings.IMAGE_REGISTRY}/t-{tenant}/{_repository(image.name)}:{tag}"


@dataclass(frozen=True)
class Saving:
    """A save order's answer: the image, whether this call made it, and a warning to show."""

    image: Image
    created: bool
    warning: str


SAVABLE = (S.STOPPED, S.RUNNING)


def image_save(*, user: User, instance: Instance, name: str, idempotency_key: str = "") -> Saving:
    """Save an instance's system disk as a new image of its tenant (status saving): a build
    pod on the cluster pushes what changed since its image as a layer on top of it
    (instances.provisioning.saving), never the web tier. From a stopped instance, or a running
    one with a warning (files written meanwhile may be saved half-written); 409 in any other
    state. The same Idempotency-Key answers the same image."""
    name = name.strip()
    with transaction.atomic():
        locked = instance_locked(instance.pk)
        if locked.status not in SAVABLE:
            raise Conflict(
                _(
                    "Only a stopped or running instance can be saved as an image; this one is "
                    "%(status)s. Wait until it is stopped or running, then save it."
                )
                % {"status": locked.get_status_display()},
                code="wrong_state",
            )
        image = Image(
            id=new_id("img"),
            name=name,
            description="",
            tenant_id=locked.tenant_id,
            created_by=user,
            status=ImageStatus.SAVING,
            base=locked.image.container_image,
            saved_from=locked.id,
            idempotency_key=idempotency_key,
        )
        image.container_image = saved_reference(image)
        try:
            with transaction.atomic():
                image.save(force_insert=True)
        except IntegrityError:
            return _saved_before(locked, name, idempotency_key)
        saving_note(
            image=image,
            message=later("Saving as the image %(name)s started (%(image)s).")
            % {"name": image.name, "image": image.id},
        )
        enqueue_on_commit("instances.tasks.save_image", image.id)
    logger.info("image.saving image=%s instance=%s tenant=%s", image.id, locked.id, image.tenant_id)
    return Saving(image, True, _running_warning(locked))


def saving_note(*, image: Image, message: str) -> None:
    """A step of saving `image` (started, saved, failed) on the timeline of the instance it is
    saved from, in the instance's status of the moment; nothing when that instance is gone."""
    status = Instance.objects.filter(pk=image.saved_from).values_list("status", flat=True).first()
    if status is not None:
        InstanceEvent.objects.create(instance_id=image.saved_from, status=status, message=message)


def _running_warning(instance: Instance) -> str:
    if instance.status != S.RUNNING:
        return ""
    return _(
        "The instance is running: files it writes while the image is saved may be saved "
        "half-written. For a consistent image, stop it first and save again."
    )


def _saved_before(instance: Instance, name: str, idempotency_key: str) -> Saving:
    if idempotency_key:
        earlier = Image.objects.filter(
            tenant_id=instance.tenant_id, idempotency_key=idempotency_key
        ).first()
        if earlier is not None:
            return Saving(earlier, False, _running_warning(instance))
    raise Conflict(
        _("You already have an image named %(name)s: choose another name.") % {"name": name},
        code="image_name_taken",
    )
