"""A tenant's webhooks: registering, changing and removing them (a team's by its owners and
admins), rotating the secret (the old one stays valid for a day), sending a test event and
delivering one again. The deliveries themselves are events.delivery's, in workers."""

from collections.abc import Iterable
from datetime import timedelta
from typing import NamedTuple

from django.db import transaction
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from events.choices import TEST_EVENT, EventType, WebhookStatus
from events.guard import AddressRefused, resolve
from events.models import Event, Webhook, WebhookDelivery
from events.signing import secret_new
from starverse.accounts.models import User
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.errors import FieldInvalid
from starverse.core.roles import MANAGERS, require_role

DELIVER_TASK = "events.tasks.deliver"
# How long the secret a rotation replaced still signs deliveries.
ROTATION_OVERLAP = timedelta(hours=24)
MAX_WEBHOOKS = 20


class Registered(NamedTuple):
    """A webhook just made, with its secret: shown this once."""

    webhook: Webhook
    secret: str


def require_webhook_manager(user: User) -> None:
    """A team's webhooks are its owners' and admins' to see and change (their secrets and URLs
    reach outside); in a personal account its person is the owner."""
    require_role(user, MANAGERS, _("managing webhooks"))


def event_types_checked(events: Iterable[str], field: str = "events") -> list[str]:
    """The event types, each one of EventType, in a stable order, at least one."""
    wanted = list(dict.fromkeys(events))
    unknown = [name for name in wanted if name not in EventType.values]
    if unknown:
        raise FieldInvalid(
            field,
            _("Unknown event type %(names)s; the types are listed in the API documentation.")
            % {"names": ", ".join(unknown)},
        )
    if not wanted:
        raise FieldInvalid(field, _("Choose at least one event type."))
    return wanted


def url_checked(url: str, field: str = "url") -> str:
    try:
        resolve(url)
    except AddressRefused as refused:
        raise FieldInvalid(field, str(refused), code="url_refused") from None
    return url


def webhook_create(*, user: User, url: str, events: list[str], description: str = "") -> Registered:
    require_webhook_manager(user)
    wanted = event_types_checked(events)
    url_checked(url)
    if Webhook.objects.filter(tenant_id=user.tenant_id).count() >= MAX_WEBHOOKS:
        raise FieldInvalid(
            "url",
            _("An account has at most %(n)s webhooks; delete one first.") % {"n": MAX_WEBHOOKS},
        )
    secret = secret_new()
    webhook = Webhook.objects.create(
        tenant_id=user.tenant_id,
        created_by=user,
        url=url,
        events=wanted,
        description=description,
        secret=secret,
        language=translation.get_language() or "zh-hans",
    )
    return Registered(webhook, secret)


def webhook_update(
    *,
    user: User,
    webhook: Webhook,
    url: str | None = None,
    events: list[str] | None = None,
    description: str | None = None,
    enabled: bool | None = None,
) -> Webhook:
    """Change what was given; enabling a disabled webhook starts its failure clock anew."""
    require_webhook_manager(user)
    fields = []
    if url is not None:
        webhook.url = url_checked(url)
        fields.append("url")
    if events is not None:
        webhook.events = event_types_checked(events)
        fields.append("events")
    if description is not None:
        webhook.description = description
        fields.append("description")
    if enabled is not None:
        webhook.status = WebhookStatus.ENABLED if enabled else WebhookStatus.DISABLED
        webhook.disabled_reason = ""
        webhook.failing_since = None
        fields += ["status", "disabled_reason", "failing_since"]
    webhook.save(update_fields=fields)
    return webhook


def webhook_delete(*, user: User, webhook: Webhook) -> None:
    require_webhook_manager(user)
    webhook.delete()


def webhook_rotate_secret(*, user: User, webhook: Webhook) -> str:
    """A new secret signs from now on; the one it replaces signs too for ROTATION_OVERLAP, so a
    receiver can switch without losing a delivery. Returns the new secret (shown once)."""
    require_webhook_manager(user)
    with transaction.atomic():
        webhook = Webhook.objects.select_for_update().get(pk=webhook.pk)
        webhook.previous_secret = webhook.secret
        webhook.previous_secret_expires_at = timezone.now() + ROTATION_OVERLAP
        webhook.secret = secret_new()
        webhook.save(update_fields=["secret", "previous_secret", "previous_secret_expires_at"])
    return webhook.secret


def delivery_redeliver(*, user: User, delivery: WebhookDelivery) -> WebhookDelivery:
    """Send the delivery's event again, with the same event id, as a new delivery (sent by a
    worker after commit)."""
    require_webhook_manager(user)
    with transaction.atomic():
        again = WebhookDelivery.objects.create(
            webhook_id=delivery.webhook_id,
            event_id=delivery.event_id,
            manual=True,
            next_attempt_at=timezone.now(),
        )
        enqueue_on_commit(DELIVER_TASK, again.id)
    return again


def webhook_test(*, user: User, webhook: Webhook) -> WebhookDelivery:
    """A `webhook.test` event, to this webhook only, whatever types it listens to."""
    require_webhook_manager(user)
    with transaction.atomic():
        event = Event.objects.create(
            tenant_id=webhook.tenant_id,
            type=TEST_EVENT,
            data={"webhook": webhook.id, "message": "Starverse test event"},
            fanned_out_at=timezone.now(),
        )
        delivery = WebhookDelivery.objects.create(
            webhook=webhook, event=event, manual=True, next_attempt_at=timezone.now()
        )
        enqueue_on_commit(DELIVER_TASK, delivery.id)
    return delivery
