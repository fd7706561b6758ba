"""Notification channels: where a person (their own account's channels) or a team (its owners'
and admins') hears about events in words — an e-mail address, or a WeCom, DingTalk or Feishu
group bot's URL, signed the way each service asks where it has a secret (DingTalk: the URL's
timestamp and sign; Feishu: the body's). A bot's notice that fails for a passing reason (no
answer, a 5xx or 429, the service's rate-limit or busy code) is tried again with the webhooks'
backoff, NOTIFY_TRIES times in all; a refusal (a 4xx, a bad key or URL) is kept at once. The
latest outcome is kept on the channel, each event's on its ChannelNotice."""

import base64
import hashlib
import hmac
import json
import logging
import time
from urllib.parse import quote_plus

from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import Q
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from events.choices import EMAIL_DEFAULTS, TEST_EVENT, ChannelKind
from events.delivery import backoff
from events.messages import Notice, notice_for
from events.models import ChannelNotice, Event, NotificationChannel
from events.sender import Answer, post
from events.webhooks import event_types_checked, require_webhook_manager, url_checked
from starverse.accounts.models import User
from starverse.core.dispatch import enqueue_on_commit
from starverse.core.errors import FieldInvalid
from starverse.core.roles import MANAGERS

logger = logging.getLogger(__name__)
NOTIFY_TASK = "events.tasks.notify"
SIGNED_KINDS = (ChannelKind.DINGTALK, ChannelKind.FEISHU)
# Tries of one notice in all: the first, then retries after delivery.BACKOFF_S's first four
# waits (30 s, 2 min, 10 min, 30 min, each plus its jitter): given up after about 45 minutes.
NOTIFY_TRIES = 5
# The services' codes in a 200 answer that mean "later": WeCom's and DingTalk's busy (-1),
# WeCom's rate limit (45009), DingTalk's (130101), Feishu's (9499, 11232).
BUSY_CODES = frozenset({-1, 45009, 130101, 9499, 11232})


def channel_create(
    *,
    user: User,
    kind: str,
    target: str = "",
    secret: str = "",
    events: list[str] | None = None,
    language: str | None = None,
) -> NotificationChannel:
    """A channel of the acting tenant. An e-mail channel without an address mails the person
    making it; one without events hears the defaults (EMAIL_DEFAULTS)."""
    require_webhook_manager(user)
    if kind == ChannelKind.EMAIL:
        target = target or user.email
        try:
            validate_email(target)
        except ValidationError:
            raise FieldInvalid("target", _("Give a valid e-mail address.")) from None
    else:
        url_checked(target, "target")
    if secret and kind not in SIGNED_KINDS:
        raise FieldInvalid("secret", _("Only DingTalk and Feishu bots take a signing secret."))
    return NotificationChannel.objects.create(
        tenant_id=user.tenant_id,
        created_by=user,
        kind=kind,
        target=target,
        secret=secret,
        events=event_types_checked(events if events is not None else EMAIL_DEFAULTS),
        language=language or translation.get_language() or "zh-hans",
    )


def email_defaults_give(*, tenant_id: str, person: User, team: bool = False) -> None:
    """The e-mail channel a new account starts with, hearing the defaults in the language its
    maker signed up in (the active one): a person's own goes to their address; a team's to
    its owners and admins of the day (an empty target: MANAGERS, read at each send), the
    people who can act on what it says, and the member who ordered what it is about. It is
    the one way notices reach people by mail (the products mail no notices of their own), so
    switching it off or choosing its events is the whole of what they receive."""
    NotificationChannel.objects.create(
        tenant_id=tenant_id,
        created_by=person,
        kind=ChannelKind.EMAIL,
        target="" if team else person.email,
        events=list(EMAIL_DEFAULTS),
        language=translation.get_language() or "zh-hans",
    )


def _managers(tenant_id: str, *, orderer: str | None = None) -> list[str]:
    """A team's owners' and admins' addresses (a personal account's person counts as both),
    and, for an event about something a member ordered (`orderer`, a user id), that member's
    while they are one: the person whose instance sits idle hears it, a removed member never."""
    people = Q(memberships__tenant_id=tenant_id, memberships__role__in=MANAGERS)
    if orderer:
        people |= Q(pk=orderer, memberships__tenant_id=tenant_id)
    return list(
        User.objects.filter(Q(tenant_id=tenant_id) | people, is_active=True)
        .values_list("email", flat=True)
        .distinct()
        .order_by("email")
    )


def channel_update(
    *,
    user: User,
    channel: NotificationChannel,
    events: list[str] | None = None,
    enabled: bool | None = None,
    language: str | None = None,
) -> NotificationChannel:
    require_webhook_manager(user)
    if events is not None:
        channel.events = event_types_checked(events)
    if enabled is not None:
        channel.enabled = enabled
    if language is not None:
        channel.language = language
    channel.save(update_fields=["events", "enabled", "language"])
    return channel


def channel_delete(*, user: User, channel: NotificationChannel) -> None:
    require_webhook_manager(user)
    channel.delete()


def _text(notice: Notice) -> str:
    return f"{notice.text}\n{notice.link}"


def dingtalk_signed_url(url: str, secret: str, now_ms: int) -> str:
    """DingTalk's signature: base64 HMAC-SHA256 of "<ms>\\n<secret>", keyed with the secret,
    as the URL's timestamp and sign."""
    digest = hmac.new(secret.encode(), f"{now_ms}\n{secret}".encode(), hashlib.sha256).digest()
    joiner = "&" if "?" in url else "?"
    return f"{url}{joiner}timestamp={now_ms}&sign={quote_plus(base64.b64encode(digest))}"


def feishu_sign(secret: str, now_s: int) -> str:
    """Feishu's signature: base64 HMAC-SHA256 of nothing, keyed with "<s>\\n<secret>"."""
    digest = hmac.new(f"{now_s}\n{secret}".encode(), b"", hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def bot_request(channel: NotificationChannel, notice: Notice, now: float) -> tuple[str, bytes]:
    """The URL and JSON body a bot's service takes for a short text with a link."""
    url, text = channel.target, _text(notice)
    if channel.kind == ChannelKind.WECOM:
        body: dict[str, object] = {"msgtype": "text", "text": {"content": text}}
    elif channel.kind == ChannelKind.DINGTALK:
        body = {"msgtype": "text", "text": {"content": text}}
        if channel.secret:
            url = dingtalk_signed_url(url, channel.secret, int(now * 1000))
    else:
        body = {"msg_type": "text", "content": {"text": text}}
        if channel.secret:
            body = {
                "timestamp": str(int(now)),
                "sign": feishu_sign(channel.secret, int(now)),
                **body,
            }
    return url, json.dumps(body, ensure_ascii=False).encode()


def bot_error(answer: Answer) -> tuple[str, bool]:
    """Why a bot refused ("" when it took the message), and whether to try again: the
    services answer 200 with an error code, some of which mean busy or rate-limited."""
    if not answer.ok:
        return answer.error or _("no answer"), answer.retryable
    try:
        reply = json.loads(answer.body)
    except ValueError:
        return "", False
    code = reply.get("errcode", reply.get("code", 0)) if isinstance(reply, dict) else 0
    if code:
        return f"{code}: {reply.get('errmsg', reply.get('msg', ''))}"[:300], code in BUSY_CODES
    return "", False


def _claim(channel_id: str, event_id: str) -> ChannelNotice | None:
    """The event's notice to the channel, counted as one more attempt; None when the channel
    is gone or off, the event gone, or the notice already sent or given up (a redelivered
    task)."""
    channel = NotificationChannel.objects.filter(pk=channel_id, enabled=True).first()
    if channel is None or not Event.objects.filter(pk=event_id).exists():
        return None
    with transaction.atomic():
        ChannelNotice.objects.get_or_create(channel=channel, event_id=event_id)
        notice = (
            ChannelNotice.objects.select_for_update()
            .select_related("channel", "event")
            .get(channel=channel, event_id=event_id)
        )
        if notice.sent_at is not None or notice.given_up:
            return None
        notice.attempts += 1
        notice.save(update_fields=["attempts"])
    return notice


def _send(notice: ChannelNotice) -> tuple[str, bool]:
    """One attempt: the error ("" when sent) and whether it is worth another."""
    channel, event = notice.channel, notice.event
    words = notice_for(event.type, event.data, channel.language)
    if channel.kind == ChannelKind.EMAIL:
        recipients = (
            [channel.target]
            if channel.target
            else _managers(channel.tenant_id, orderer=event.data.get("ordered_by"))
        )
        if recipients:
            send_mail(words.text, _text(words), None, recipients)
        return "", False
    url, body = bot_request(channel, words, time.time())
    return bot_error(post(url, body, {"User-Agent": "Starverse-Notices/1"}))


def notify(channel_id: str, event_id: str) -> str:
    """One attempt to tell the channel about the event, in its language, recorded before the
    task is acknowledged; a passing failure starts the next attempt after its backoff, until
    NOTIFY_TRIES. Returns the error ("" when sent, or when there was nothing to send)."""
    notice = _claim(channel_id, event_id)
    if notice is None:
        return ""
    error, retryable = _send(notice)
    retry = bool(error) and retryable and notice.attempts < NOTIFY_TRIES
    if error and not retryable:
        error = _("Refused, not retried (check the bot's URL and key): %(error)s") % {
            "error": error
        }
    elif error and not retry:
        error = _("Gave up after %(tries)s tries: %(error)s") % {
            "tries": notice.attempts,
            "error": error,
        }
    error = error[:300]
    with transaction.atomic():
        ChannelNotice.objects.filter(pk=notice.pk).update(
            sent_at=None if error else timezone.now(),
            given_up=bool(error) and not retry,
            error=error,
        )
        NotificationChannel.objects.filter(pk=channel_id).update(
            last_sent_at=timezone.now(), last_error=error
        )
        if retry:
            wait = backoff(f"{channel_id}:{event_id}", notice.attempts).total_seconds()
            enqueue_on_commit(NOTIFY_TASK, channel_id, event_id, countdown=wait)
    logger.info(
        "channel.notified channel=%s event=%s attempt=%s error=%s retry=%s",
        channel_id,
        event_id,
        notice.attempts,
        bool(error),
        retry,
    )
    return error


def channel_test(*, user: User, channel: NotificationChannel) -> str:
    """A test notice, sent by a worker after commit like every other (its outcome is the
    channel's `last_sent_at` and `last_error`). Returns the test event's id."""
    require_webhook_manager(user)
    with transaction.atomic():
        event = Event.objects.create(
            tenant_id=channel.tenant_id,
            type=TEST_EVENT,
            data={"url": "/console/webhooks/"},
            fanned_out_at=timezone.now(),
        )
        enqueue_on_commit(NOTIFY_TASK, channel.id, event.id)
    return event.id
