"""What a notice says about each event type, short, in the reader's language, with a link to
the page (the event's `url`, a console path)."""

from typing import Any, NamedTuple

from django.utils import translation
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from events.choices import TEST_EVENT, EventType
from starverse.core.links import public_url

# %(name)s is the resource's name (or id); the other names come from the event's data.
TEXTS: dict[str, Any] = {
    EventType.INSTANCE_RUNNING: _("Instance %(name)s is running."),
    EventType.INSTANCE_STOPPED: _("Instance %(name)s stopped."),
    EventType.INSTANCE_PREEMPTED: _("Spot instance %(name)s was taken back."),
    EventType.INSTANCE_IDLE_WARNING: _("Instance %(name)s is idle and stops soon."),
    EventType.INSTANCE_AUTO_STOPPED: _("Instance %(name)s was stopped automatically."),
    EventType.CLUSTER_READY: _("Cluster %(name)s is ready."),
    EventType.CLUSTER_DEGRADED: _("Cluster %(name)s is degraded."),
    EventType.CLUSTER_RECOVERED: _("Cluster %(name)s recovered."),
    EventType.JOB_STARTED: _("Job %(name)s started."),
    EventType.JOB_RECOVERING: _("Job %(name)s is recovering."),
    EventType.JOB_SUCCEEDED: _("Job %(name)s succeeded."),
    EventType.JOB_FAILED: _("Job %(name)s failed."),
    EventType.ENDPOINT_RUNNING: _("Endpoint %(name)s is running."),
    EventType.ENDPOINT_SCALED: _("Endpoint %(name)s scaled to %(replicas)s replicas."),
    EventType.BALANCE_LOW: _(
        "Your balance is low: %(balance)s left, about %(runway_minutes)s minutes at your "
        "current spend. Top up to keep running."
    ),
    EventType.BUDGET_REACHED: _("A monthly budget was reached: %(name)s."),
    EventType.TOPUP_PAID: _("Top-up of %(amount)s paid."),
    EventType.INVOICE_ISSUED: _("Invoice %(name)s issued."),
    TEST_EVENT: _("A test notice from Starverse."),
}


class Notice(NamedTuple):
    """One event in words: a title, one line, and the page's full address."""

    title: str
    text: str
    link: str


class _Words(dict[str, Any]):
    """The event's data, with a blank for whatever a text names that the data lacks."""

    def __missing__(self, key: str) -> str:
        return "?"


def notice_for(event_type: str, data: dict[str, Any], language: str) -> Notice:
    words = _Words(data)
    words.setdefault("name", data.get("id", ""))
    with translation.override(language):
        text = str(TEXTS.get(event_type, event_type)) % words
        title = "Starverse · " + gettext("Notice")
    return Notice(title, text, public_url(str(data.get("url", "/console/"))))
