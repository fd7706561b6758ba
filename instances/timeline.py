"""Kubernetes events on an instance's timeline, told as sentences in the reader's language.

An event is stored as the cluster wrote it ("Kubernetes: %(event)s", the event being
"Reason: message", instances.provisioning.converge.events_record) and turned into a sentence
here when it is read, so a Chinese reader sees Chinese for an event stored while its owner
browsed in English. Known reasons become sentences, with the image, sizes and durations read
out of kubelet's messages; an unknown reason, or a message of a shape not understood, has no
sentence and is shown as stored. The console pages, the API's `text` and the admin read it
here, and nowhere else."""

import re
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal

from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from starverse.core.sizes import format_size

# What events_record stores: one parameter holding "Reason: message".
SOURCE = "Kubernetes: %(event)s"

_IMAGE = r'(?:image\s+)?"(?P<image>[^"]+)"'
_PULLED = re.compile(
    r'Successfully pulled image "(?P<image>[^"]+)" in (?P<took>[0-9.a-zµμ]+)'
    r"(?: \((?P<waited>[0-9.a-zµμ]+) including waiting\))?"
)
_PRESENT = re.compile(r'Container image "(?P<image>[^"]+)" already present on machine')
_SIZE = re.compile(r"Image size: (?P<bytes>\d+) bytes")
_PULLING = re.compile(r'Pulling image "(?P<image>[^"]+)"')
_CONTAINER = re.compile(r"(?:Created|Started|Stopping) container:? (?P<name>[\w.-]+)")
_BACKOFF_CONTAINER = re.compile(r"Back-off restarting failed container (?P<name>[\w.-]+)")
_BACKOFF_PULL = re.compile(r"Back-off pulling " + _IMAGE)
_FAILED_PULL = re.compile(r"Failed to pull " + _IMAGE)
_ASSIGNED = re.compile(r"Successfully assigned \S+/\S+ to (?P<node>\S+)")
_NODES = re.compile(r"(?P<free>\d+)/(?P<total>\d+) nodes are available")
_SHORT = re.compile(r"(?P<count>\d+) Insufficient (?P<resource>[\w./-]*\w)")
_VOLUME = re.compile(r'(?:for volume "(?P<volume>[^"]+)"|unmounted volumes=\[(?P<list>[^\]]*)\])')
_LOW_ON = re.compile(r"low on resource: (?P<resource>[\w-]+)")
_PROCESS = re.compile(r"Killed process (?P<pid>\d+) \((?P<name>[^)]+)\)")
_GO_PART = re.compile(r"(?P<value>\d+(?:\.\d+)?)(?P<unit>ns|us|µs|μs|ms|s|m|h)")
_GO_UNIT_S = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "µs": Decimal("1e-6"),
    "μs": Decimal("1e-6"),
    "ms": Decimal("0.001"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
}


def go_duration_s(text: str) -> Decimal | None:
    """Seconds of a Go duration as kubelet prints them ("2m5.1s", "850ms", "1h0m2s"), or None
    when `text` is not one."""
    parts = list(_GO_PART.finditer(text))
    if not parts or "".join(p.group(0) for p in parts) != text:
        return None
    return sum((Decimal(p["value"]) * _GO_UNIT_S[p["unit"]] for p in parts), Decimal(0))


def _round(value: Decimal, places: str = "1") -> Decimal:
    return value.quantize(Decimal(places), rounding=ROUND_HALF_UP)


def human_duration(seconds: Decimal) -> str:
    """ "850 ms", "1.5 s", "42 s", "2 min 5 s", "1 h 3 min" in the active language."""
    if seconds < 1:
        return _("%(n)s ms") % {"n": _round(seconds * 1000)}
    if seconds < 10:
        return _("%(n)s s") % {"n": _round(seconds, "0.1")}
    whole = int(_round(seconds))
    if whole < 60:
        return _("%(n)s s") % {"n": whole}
    if whole < 3600:
        minutes, rest = divmod(whole, 60)
        if not rest:
            return _("%(m)s min") % {"m": minutes}
        return _("%(m)s min %(s)s s") % {"m": minutes, "s": rest}
    hours, rest = divmod(whole, 3600)
    if rest < 60:
        return _("%(h)s h") % {"h": hours}
    return _("%(h)s h %(m)s min") % {"h": hours, "m": rest // 60}


def _pulled(message: str) -> str | None:
    if present := _PRESENT.search(message):
        return _("The image %(image)s was already on the node.") % {"image": present["image"]}
    pulled = _PULLED.search(message)
    took = go_duration_s(pulled["took"].rstrip(".")) if pulled else None
    if pulled is None or took is None:
        return None
    size = _SIZE.search(message)
    if size and int(size["bytes"]):
        return _("Pulled the image %(image)s (%(size)s) in %(took)s.") % {
            "image": pulled["image"],
            "size": format_size(int(size["bytes"])),
            "took": human_duration(took),
        }
    return _("Pulled the image %(image)s in %(took)s.") % {
        "image": pulled["image"],
        "took": human_duration(took),
    }


def _pulling(message: str) -> str | None:
    if found := _PULLING.search(message):
        return _("Pulling the image %(image)s.") % {"image": found["image"]}
    return None


def _container(sentence: str) -> Callable[[str], str | None]:
    def told(message: str) -> str | None:
        if found := _CONTAINER.search(message):
            return _(sentence) % {"name": found["name"]}
        return None

    return told


def _scheduled(message: str) -> str | None:
    if found := _ASSIGNED.search(message):
        return _("Assigned to the node %(node)s.") % {"node": found["node"]}
    return None


_SHORT_OF = {
    "nvidia.com/gpu": gettext_noop("%(n)s without enough free GPUs"),
    "cpu": gettext_noop("%(n)s without enough free CPU"),
    "memory": gettext_noop("%(n)s without enough free memory"),
    "ephemeral-storage": gettext_noop("%(n)s without enough local disk"),
}


def _failed_scheduling(message: str) -> str | None:
    nodes = _NODES.search(message)
    if nodes is None:
        return None
    reasons = [
        _(_SHORT_OF[short["resource"]]) % {"n": short["count"]}
        for short in _SHORT.finditer(message.split("preemption:")[0])
        if short["resource"] in _SHORT_OF
    ]
    if reasons:
        return _("Waiting for room: %(free)s of %(total)s nodes can take it (%(why)s).") % {
            "free": nodes["free"],
            "total": nodes["total"],
            "why": _(", ").join(reasons),
        }
    return _("Waiting for room: %(free)s of %(total)s nodes can take it.") % {
        "free": nodes["free"],
        "total": nodes["total"],
    }


def _backoff(message: str) -> str | None:
    if found := _BACKOFF_CONTAINER.search(message):
        return _("The container %(name)s keeps failing; it is restarted after a growing pause.") % {
            "name": found["name"]
        }
    if found := _BACKOFF_PULL.search(message):
        return _("The image %(image)s could not be pulled; trying again after a pause.") % {
            "image": found["image"]
        }
    return None


def _failed(message: str) -> str | None:
    if found := _FAILED_PULL.search(message):
        return _("The image %(image)s could not be pulled.") % {"image": found["image"]}
    if message.startswith("Error: ErrImagePull") or message.startswith("Error: ImagePullBackOff"):
        return _("The image could not be pulled.")
    return None


def _failed_mount(message: str) -> str | None:
    found = _VOLUME.search(message)
    volume = (found["volume"] or found["list"]) if found else ""
    if volume:
        return _("The volume %(volume)s could not be mounted yet; trying again.") % {
            "volume": volume
        }
    return _("A volume could not be mounted yet; trying again.")


_RESOURCES = {
    "memory": gettext_noop("memory"),
    "ephemeral-storage": gettext_noop("local disk"),
    "pid": gettext_noop("process ids"),
}


def _evicted(message: str) -> str | None:
    if found := _LOW_ON.search(message):
        resource = found["resource"]
        return _("Evicted: its node ran low on %(resource)s.") % {
            "resource": _(_RESOURCES[resource]) if resource in _RESOURCES else resource
        }
    return _("Evicted from its node.")


def _oom(message: str) -> str | None:
    if found := _PROCESS.search(message):
        return _("Out of memory: the process %(name)s (%(pid)s) was killed.") % {
            "name": found["name"],
            "pid": found["pid"],
        }
    return _("Out of memory: a process was killed.")


def _unhealthy(message: str) -> str | None:
    for probe, sentence in (
        ("Readiness probe failed", gettext_noop("The readiness check failed.")),
        (
            "Liveness probe failed",
            gettext_noop("The liveness check failed; the container will restart."),
        ),
        ("Startup probe failed", gettext_noop("The startup check failed.")),
    ):
        if message.startswith(probe):
            return _(sentence)
    return _("A health check failed.")


def _preempting(message: str) -> str | None:
    return _("Stopped to make room for work of a higher priority.")


def _node_not_ready(message: str) -> str | None:
    return _("Its node is not ready.")


def _image_size(message: str) -> str | None:
    if found := re.match(r"(?P<bytes>\d+) bytes", message):
        return _("The image is %(size)s.") % {"size": format_size(int(found["bytes"]))}
    return None


_TOLD: dict[str, Callable[[str], str | None]] = {
    "Scheduled": _scheduled,
    "FailedScheduling": _failed_scheduling,
    "Pulling": _pulling,
    "Pulled": _pulled,
    "Created": _container(gettext_noop("Created the container %(name)s.")),
    "Started": _container(gettext_noop("Started the container %(name)s.")),
    "Killing": _container(gettext_noop("Stopping the container %(name)s.")),
    "BackOff": _backoff,
    "Failed": _failed,
    "FailedMount": _failed_mount,
    "Evicted": _evicted,
    "OOMKilled": _oom,
    "OOMKilling": _oom,
    "Preempting": _preempting,
    "Preempted": _preempting,
    "Unhealthy": _unhealthy,
    "NodeNotReady": _node_not_ready,
    "Image size": _image_size,
}


def kubernetes_event(source: str, params: dict[str, object]) -> tuple[str, str] | None:
    """(reason, message) of a stored Kubernetes event, or None for any other step."""
    if source != SOURCE:
        return None
    reason, _sep, message = str(params.get("event", "")).partition(": ")
    return reason, message


def sentence(source: str, params: dict[str, object]) -> str | None:
    """The stored step as a sentence in the active language when it is a Kubernetes event of a
    known reason whose message is understood; None otherwise (show it as stored)."""
    event = kubernetes_event(source, params)
    if event is None:
        return None
    reason, message = event
    told = _TOLD.get(reason)
    return told(message) if told else None
