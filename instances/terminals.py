"""The web terminal's side of instances (docs/user-guide.md "Terminal"): who may open a shell in
which container, and the timeline rows of each session. A session is recorded by who opened it,
when, how long it lasted and why it ended; never by what was typed or shown."""

import logging
from dataclasses import dataclass

from django.http import Http404
from django.utils.translation import gettext as _

from fleet.selectors import region_target
from instances.choices import InstanceStatus
from instances.models import Instance, InstanceEvent
from starverse.accounts.models import User
from starverse.accounts.teams import usable_by
from starverse.core import kube
from starverse.core.errors import Conflict
from starverse.core.text import later

logger = logging.getLogger(__name__)
S = InstanceStatus
CONTAINER = "main"
# A login shell, bash where the image has it; a terminal type xterm.js speaks, and a UTF-8
# locale unless the image sets one (Chinese input and output need it).
SHELL = [
    "/bin/sh",
    "-c",
    'export TERM=xterm-256color; [ -n "$LANG" ] || export LANG=C.UTF-8; '
    "if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec sh -l",
]
# Why a session ended, as stored in its timeline row (translated when shown).
ENDED_EXIT = later("the shell exited")
ENDED_IDLE = later("it was idle too long")
ENDED_CLOSED = later("the browser closed it")
ENDED_SERVICE = later("the terminal service stopped")
ENDED_ACCESS = later("the console session ended or access to the instance was withdrawn")


class InstanceNotRunning(Conflict):
    code = "instance_not_running"


@dataclass(frozen=True)
class TerminalTarget:
    """Where a shell for this instance runs."""

    instance_id: str
    namespace: str
    pod: str
    container: str
    command: tuple[str, ...]
    # the instance's region's cluster (None: the default, KUBECONFIG's)
    cluster: kube.Target | None = None


def _not_running(status: str) -> str:
    if status == S.QUEUED:
        return _(
            "This instance is queued: it has no container yet. Open the terminal once it runs."
        )
    if status == S.PROVISIONING:
        return _("This instance is starting. Open the terminal again once it is running.")
    if status in (S.STOPPING, S.STOPPED):
        return _("This instance is stopped: start it to open a terminal.")
    if status == S.FAILED:
        return _("This instance failed: start it again to open a terminal.")
    return _("This instance is terminated: there is no container to open a terminal in.")


def terminal_target(*, user: User, instance_id: str) -> TerminalTarget:
    """The container of a running instance the person may use (their own; in a team, by their
    role now: starverse.accounts.teams.usable_by). Any other instance is a 404 like a missing
    one (Http404); one that is not running, InstanceNotRunning saying what to do. The terminal
    asks this again during a session, so a session ends when the answer changes."""
    instance = Instance.objects.select_related("region").filter(pk=instance_id).first()
    if instance is None or not usable_by(user, instance):
        raise Http404
    if instance.status != S.RUNNING or not instance.k8s_name:
        raise InstanceNotRunning(_not_running(instance.status))
    return TerminalTarget(
        instance_id=instance.id,
        namespace=instance.k8s_namespace,
        pod=instance.k8s_name,
        container=CONTAINER,
        command=tuple(SHELL),
        cluster=(
            region_target(instance.region)
            if instance.region is not None and instance.region.kubeconfig
            else None
        ),
    )


def terminal_session_start(*, instance_id: str, user_email: str) -> None:
    """A timeline row: who opened a terminal."""
    instance = Instance.objects.get(pk=instance_id)
    InstanceEvent.objects.create(
        instance=instance,
        status=instance.status,
        message=later("Terminal opened by %(user)s.") % {"user": user_email},
    )
    logger.info("terminal.opened instance=%s user=%s", instance_id, user_email)


def terminal_session_end(*, instance_id: str, user_email: str, seconds: float, reason: str) -> None:
    """A timeline row: whose terminal session ended, after how long, and why."""
    instance = Instance.objects.filter(pk=instance_id).first()
    if instance is None:
        return
    whole = max(int(seconds), 0)
    InstanceEvent.objects.create(
        instance=instance,
        status=instance.status,
        message=later(
            "Terminal session of %(user)s ended after %(minutes)s min %(seconds)s s (%(reason)s)."
        )
        % {"user": user_email, "minutes": whole // 60, "seconds": whole % 60, "reason": reason},
    )
    logger.info(
        "terminal.closed instance=%s user=%s seconds=%d reason=%s",
        instance_id,
        user_email,
        whole,
        reason,
    )
