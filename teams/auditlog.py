"""The team audit log as people read it: each event a sentence in the reader's language
("ana@x set the monthly budget of bob@x to ¥500.00"), its objects links to where the reader
can open them. Every action code the product writes has its sentence here (a test reads the
codes from the sources); an unknown one reads as its code. The API and the CSV keep the codes."""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.urls import reverse
from django.utils.html import conditional_escape, escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from starverse.accounts.models import AuditEvent, Role, User
from starverse.core.money import format_fen

# action code → sentence. %(actor)s is who did it, %(object)s the object (a link where the
# reader can open it); the other names are the event's data.
SENTENCES: dict[str, Any] = {
    "team.created": _("%(actor)s created the team."),
    "invitation.created": _("%(actor)s invited %(email)s as %(role)s."),
    "invitation.revoked": _("%(actor)s revoked the invitation of %(email)s."),
    "invitation.accepted": _("%(actor)s accepted the invitation and joined as %(role)s."),
    "member.role_changed": _("%(actor)s changed the role of %(object)s from %(from)s to %(to)s."),
    "member.removed": _("%(actor)s removed %(object)s from the team."),
    "budget.set": _("%(actor)s set the monthly budget of %(object)s to %(amount)s."),
    "budget.set.team": _("%(actor)s set the team's monthly budget to %(amount)s."),
    "token.created": _("%(actor)s created the API token “%(name)s”."),
    "token.revoked": _("%(actor)s revoked the API token “%(name)s”."),
    "token.caps_changed": _("%(actor)s changed the caps of the API token “%(name)s”."),
    "topup.created": _("%(actor)s started a top-up of %(amount)s."),
    "topup.paid": _("The top-up %(object)s of %(amount)s was paid."),
    "topup.cancelled": _("%(actor)s cancelled the unpaid top-up %(object)s of %(amount)s."),
    "topup.expired": _(
        "The unpaid top-up %(object)s of %(amount)s expired at the payment provider."
    ),
    "instance.ordered": _("%(actor)s ordered the instance %(object)s."),
    "instance.cloned": _("%(actor)s cloned an instance as %(object)s."),
    "instance.started": _("%(actor)s started the instance %(object)s."),
    "instance.stopped": _("%(actor)s stopped the instance %(object)s."),
    "instance.terminated": _("%(actor)s terminated the instance %(object)s."),
    "instance.kept_running": _(
        "%(actor)s kept the instance %(object)s running past its idle stop."
    ),
    "instance.ports_changed": _("%(actor)s changed the open ports of the instance %(object)s."),
    "image.created": _("%(actor)s brought the image %(object)s (“%(name)s”)."),
    "image.deleted": _("%(actor)s deleted the image “%(name)s”."),
    "image.saving": _("%(actor)s began saving an instance as the image %(object)s."),
    "disk.created": _("%(actor)s created the disk %(object)s (%(size_gb)s GB)."),
    "disk.resized": _("%(actor)s resized the disk %(object)s to %(size_gb)s GB."),
    "disk.deleted": _("%(actor)s deleted the disk “%(name)s”."),
    "disk.attached": _("%(actor)s attached the disk %(object)s to the instance %(instance)s."),
    "disk.detached": _("%(actor)s detached the disk %(object)s from the instance %(instance)s."),
    "nas.created": _("%(actor)s created the shared NAS (%(size_gb)s GB)."),
    "nas.resized": _("%(actor)s resized the shared NAS to %(size_gb)s GB."),
    "nas.deleted": _("%(actor)s deleted the shared NAS."),
    "webhook.created": _("%(actor)s added the webhook %(url)s."),
    "webhook.changed": _("%(actor)s changed the webhook %(url)s."),
    "webhook.deleted": _("%(actor)s deleted the webhook %(url)s."),
    "webhook.secret_rotated": _("%(actor)s rotated the secret of the webhook %(url)s."),
    "channel.created": _("%(actor)s added a %(kind)s notification channel."),
    "channel.deleted": _("%(actor)s deleted a %(kind)s notification channel."),
    "share.created": _("%(actor)s shared port %(port)s of the instance %(instance)s."),
    "share.revoked": _("%(actor)s revoked a shared port of the instance %(instance)s."),
    "cluster.ordered": _("%(actor)s ordered the cluster %(object)s of %(nodes)s nodes."),
    "cluster.scaled": _("%(actor)s scaled the cluster %(object)s to %(nodes)s nodes."),
    "cluster.started": _("%(actor)s started the cluster %(object)s."),
    "cluster.stopped": _("%(actor)s stopped the cluster %(object)s."),
    "cluster.terminated": _("%(actor)s terminated the cluster %(object)s."),
    "job.submitted": _("%(actor)s submitted the job %(object)s."),
    "job.cancelled": _("%(actor)s cancelled the job %(object)s."),
    "endpoint.created": _("%(actor)s created the inference endpoint %(object)s."),
    "endpoint.changed": _("%(actor)s changed the inference endpoint %(object)s."),
    "endpoint.deleted": _("%(actor)s deleted the inference endpoint “%(name)s”."),
    "endpoint.key_created": _("%(actor)s created the key “%(name)s” of the endpoint %(endpoint)s."),
    "endpoint.key_revoked": _("%(actor)s revoked a key of the endpoint %(endpoint)s."),
}

# Where an object of a type opens in the console, when the reader acts for the team: a page of
# its own (by id), or the list it is on.
_PAGES = {
    "instance": "instances:detail",
    "cluster": "clusters:detail",
    "job": "jobs:detail",
    "endpoint": "endpoints:detail",
}
_LISTS = {"disk": "console:disks", "sharednas": "console:disks", "topup": "billing:billing"}


@dataclass(frozen=True)
class Reading:
    """Who reads the log: the team's id, whether they act for it now (the console's objects
    open only there), and the e-mail of each person the events name."""

    team_id: str
    acting: bool
    emails: dict[str, str]


def reading_for(reader: User, team_id: str, events: Iterable[AuditEvent]) -> Reading:
    ids = {e.object_id for e in events if e.object_type == "user"}
    emails = dict(User.objects.filter(pk__in=ids).values_list("pk", "email"))
    return Reading(team_id=team_id, acting=reader.tenant_id == team_id, emails=emails)


def _code(text: str) -> SafeString:
    return format_html('<code class="mono">{}</code>', text)


def _link(text: str, url: str) -> SafeString:
    return format_html('<a href="{}">{}</a>', url, text)


def _object(kind: str, pk: str, reading: Reading) -> SafeString:
    if kind == "user":
        url = reverse("teams:team", args=[reading.team_id]) + f"#member-{pk}"
        return _link(reading.emails.get(pk, pk), url)
    if reading.acting and kind in _PAGES:
        return _link(_code(pk), reverse(_PAGES[kind], args=[pk]))
    if reading.acting and kind in _LISTS:
        return _link(_code(pk), reverse(_LISTS[kind]))
    return _code(pk)


def _role(value: Any) -> str:
    return str(Role(value).label) if value in Role.values else str(value)


def sentence(event: AuditEvent, reading: Reading) -> SafeString:
    """The event as a sentence in the active language (HTML: its objects may be links); the
    action's code when it has no sentence or its data lacks what the sentence names."""
    code = event.action
    if code == "budget.set" and event.object_type == "team":
        code = "budget.set.team"
    source = SENTENCES.get(code)
    if source is None:
        return _code(event.action)
    data = event.data or {}
    values: dict[str, Any] = {key: conditional_escape(value) for key, value in data.items()}
    values["actor"] = escape(event.actor.email if event.actor else gettext("Someone"))
    values["object"] = _object(event.object_type, event.object_id, reading)
    for key in ("role", "from", "to"):
        if key in data:
            values[key] = escape(_role(data[key]))
    for key in ("amount_fen", "monthly_fen"):
        if isinstance(data.get(key), int):
            values["amount"] = escape(format_fen(data[key]))
    for key in ("instance", "endpoint"):  # the instance or endpoint an object belongs to
        if key in data:
            values[key] = _object(key, str(data[key]), reading)
    try:
        return mark_safe(escape(str(source)) % values)  # noqa: S308 (every value is escaped)
    except (KeyError, TypeError, ValueError):
        return _code(event.action)
