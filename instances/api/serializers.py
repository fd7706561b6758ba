from collections.abc import Callable, Mapping
from datetime import datetime, tzinfo
from typing import Any, NamedTuple, cast

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from rest_framework import ISO_8601, serializers
from rest_framework.settings import api_settings

from compute.choices import BillingMode, ImageStatus
from compute.models import Image, Offering
from fleet.models import GpuModel
from instances.gateway import MAX_PORTS, jupyter_url, ports_output
from instances.models import Instance, InstanceEvent, PortShare
from instances.schedules import MAX_STOP_AFTER_HOURS, idle_stop_of
from instances.selectors import queue_positions
from starverse.accounts.models import IDLE_MINUTES_RANGE, IDLE_UTIL_PCT_RANGE
from starverse.core.api.dryrun import DryRunInput, dry_run_field
from starverse.core.api.serializers import (
    InputSerializer,
    LocalizedField,
    StrictCharField,
    StrictIntegerField,
)


class GpuModelOutput(serializers.ModelSerializer[GpuModel]):
    class Meta:
        model = GpuModel
        fields = ["id", "name", "memory_gb", "interconnect"]


class OfferingOutput(serializers.ModelSerializer[Offering]):
    name = LocalizedField(help_text="In the request's language (Accept-Language).")
    gpu_model = serializers.CharField(source="gpu_model_id")
    available = serializers.SerializerMethodField()
    regions = serializers.SerializerMethodField(
        help_text="The regions where nodes of this offering's GPU model are (GET /regions)."
    )
    image_warm = serializers.SerializerMethodField(
        help_text="With `?image=`: whether a free node that fits this offering already holds "
        "the image, so an instance starts in seconds (null without `?image=`)."
    )
    expected_pull_s = serializers.SerializerMethodField(
        help_text="With `?image=`: seconds the first start would spend pulling the image "
        "(0 when warm; its size at IMAGE_PULL_BANDWIDTH_MBPS otherwise; null without `?image=`)."
    )

    class Meta:
        model = Offering
        fields = [
            "id",
            "name",
            "kind",
            "gpu_model",
            "gpu_count",
            "cpu_cores",
            "memory_gb",
            "local_disk_gb",
            "price_per_hour_fen",
            "price_per_month_fen",
            "trial_price_per_hour_fen",
            "cpu_only_price_per_hour_fen",
            "spot_price_per_hour_fen",
            "available",
            "regions",
            "image_warm",
            "expected_pull_s",
        ]
        extra_kwargs = {
            "cpu_only_price_per_hour_fen": {
                "help_text": "An hour of an instance of it started without its GPUs (no-GPU "
                "mode), by the minute, from trial credit too; null: not offered."
            },
            "trial_price_per_hour_fen": {
                "help_text": "What trial credit pays per hour of it, by the minute; null: trial "
                "credit is not spent on it (cash at price_per_hour_fen only)."
            },
            "spot_price_per_hour_fen": {
                "help_text": "An hour of it as an interruptible (spot) rental, billed by the "
                "minute, in cash; taken back with notice when a paying order needs the GPUs. "
                "null: not offered as spot."
            },
        }

    def get_available(self, obj: Offering) -> int:
        available: int = self.context["availability"].get(obj.id, 0)
        return available

    def get_image_warm(self, obj: Offering) -> bool | None:
        seconds = self.get_expected_pull_s(obj)
        return None if seconds is None else seconds == 0

    def get_expected_pull_s(self, obj: Offering) -> int | None:
        warmth: dict[str, int] | None = self.context.get("warmth", {}).get(obj.id)
        return None if warmth is None else next(iter(warmth.values()))

    def get_regions(self, obj: Offering) -> list[str]:
        regions: list[str] = self.context["regions"].get(obj.id, [])
        return regions


class RegionGpuModelOutput(serializers.Serializer[Mapping[str, object]]):
    id = serializers.CharField()
    name = serializers.CharField()
    gpus = serializers.IntegerField(help_text="GPUs of this model on the region's ready nodes.")
    free = serializers.IntegerField(help_text="How many of them are free now.")


class RegionOutput(serializers.Serializer[Mapping[str, object]]):
    name = serializers.CharField(help_text="The region's id: an order's or a disk's `region`.")
    display_name = serializers.CharField()
    gpu_models = RegionGpuModelOutput(many=True)


class ImageOutput(serializers.ModelSerializer[Image]):
    size_bytes = serializers.IntegerField(
        help_text="What a node pulls (compressed layers), in bytes; 0 when not known."
    )
    prepull = serializers.BooleanField(
        help_text="Kept on every node of the catalogue's GPU models: it starts in seconds."
    )
    name = LocalizedField(help_text="In the request's language (Accept-Language).")
    description = LocalizedField(help_text="In the request's language (Accept-Language).")
    status = serializers.CharField(help_text="saving, ready or failed; the catalogue's: ready.")
    reference = serializers.CharField(
        source="container_image", help_text="The OCI reference the nodes pull."
    )
    owner = serializers.SerializerMethodField(
        help_text="`me` for the caller's own (or their team's) images, null for the catalogue's."
    )
    base = serializers.CharField(help_text="The image it was saved from; blank if not saved.")
    error_message = serializers.CharField(help_text="Why it failed, when it did.")

    class Meta:
        model = Image
        fields = [
            "id",
            "name",
            "description",
            "size_bytes",
            "prepull",
            "status",
            "reference",
            "owner",
            "base",
            "error_message",
        ]

    def get_owner(self, obj: Image) -> str | None:
        return "me" if obj.tenant_id else None


class ImageSaveInput(InputSerializer):
    name = serializers.CharField(max_length=100, help_text="The new image's name, yours alone.")


class ImageSavedOutput(ImageOutput):
    """A save order's answer: the image (saving), its size once known, and a warning."""

    size_bytes = serializers.SerializerMethodField(  # type: ignore[assignment]
        help_text="Null until it is saved (ready); then what a node pulls, in bytes."
    )
    warning = serializers.SerializerMethodField(
        help_text="Set when the instance was running: what that means for the saved files."
    )

    class Meta(ImageOutput.Meta):
        fields = [*ImageOutput.Meta.fields, "warning"]

    def get_size_bytes(self, obj: Image) -> int | None:
        return obj.size_bytes if obj.status == ImageStatus.READY else None

    def get_warning(self, obj: Image) -> str:
        return str(self.context.get("warning", ""))


class RegistryCredentialsInput(InputSerializer):
    username = serializers.CharField(max_length=255)
    password = serializers.CharField(max_length=4096, help_text="A password or an access token.")


class ImageCreateInput(InputSerializer):
    name = serializers.CharField(max_length=100)
    reference = serializers.CharField(
        max_length=300,
        help_text="An OCI reference: registry/repository:tag or registry/repository@sha256:… "
        "(Docker Hub when no registry is named), from a registry the operator allows.",
    )
    credentials = RegistryCredentialsInput(
        required=False,
        help_text="For a private registry: kept as your namespace's pull Secret, never shown "
        "again.",
    )


class IdleStopInput(InputSerializer):
    util_pct = StrictIntegerField(
        min_value=IDLE_UTIL_PCT_RANGE[0],
        max_value=IDLE_UTIL_PCT_RANGE[1],
        help_text="Idle means every GPU below this utilisation, in %.",
    )
    minutes = StrictIntegerField(
        min_value=IDLE_MINUTES_RANGE[0],
        max_value=IDLE_MINUTES_RANGE[1],
        help_text="Stop after this many minutes idle.",
    )


class IdleStopOutput(serializers.Serializer[Mapping[str, object]]):
    util_pct = serializers.IntegerField()
    minutes = serializers.IntegerField()


IDLE_STOP_HELP = (
    "Stop by itself once every GPU has been below util_pct % for minutes (a warning e-mail and "
    "banner come first); null: never."
)
STOP_AT_HELP = "Stop at this time (in the future, within a year); null: no scheduled stop."
STOP_AFTER_HELP = "Stop this many hours from now (sets stop_at); not with stop_at."


class InstanceUpdateInput(InputSerializer):
    """The automatic stops a PATCH (or an order) may set; a key left out is left as it is (at
    an order: idle_stop from the account's settings, no scheduled stop)."""

    idle_stop = IdleStopInput(required=False, allow_null=True, help_text=IDLE_STOP_HELP)
    stop_at = serializers.DateTimeField(required=False, allow_null=True, help_text=STOP_AT_HELP)
    stop_after_hours = StrictIntegerField(
        required=False, min_value=1, max_value=MAX_STOP_AFTER_HOURS, help_text=STOP_AFTER_HELP
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("stop_at") is not None and "stop_after_hours" in attrs:
            raise serializers.ValidationError(
                {"stop_at": [_("Give stop_at or stop_after_hours, not both.")]}
            )
        return attrs


class InstanceCreateInput(InstanceUpdateInput):
    dry_run = dry_run_field()
    offering = StrictCharField(max_length=32)
    image = StrictCharField(max_length=64)
    name = StrictCharField(max_length=100, required=False, allow_blank=True)
    ssh_keys = serializers.ListField(
        child=StrictCharField(max_length=32), required=False, max_length=50
    )
    disks = serializers.ListField(
        child=StrictCharField(max_length=32), required=False, max_length=8
    )
    auto_renew = serializers.BooleanField(required=False, default=True)
    auto_recover = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="On node loss, place again elsewhere with the same disks. "
        "Default: on for cloud instances, off for whole nodes.",
    )
    billing = serializers.ChoiceField(
        choices=BillingMode.choices,
        required=False,
        default=BillingMode.HOURLY,
        help_text="hourly, monthly (whole nodes), or spot: at the offering's "
        "spot_price_per_hour_fen, taken back with notice when a paying order needs the GPUs.",
    )
    spot_max_wait_minutes = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="A spot order: fail (at no cost) if not placed within this many minutes "
        "(1 to 10080); omitted: wait as long as it takes.",
    )
    ports = serializers.ListField(
        child=serializers.IntegerField(),
        required=False,
        help_text=f"HTTP ports served through the gateway besides Jupyter's (at most {MAX_PORTS};"
        " not 22 or 8888).",
    )
    mirrors = serializers.BooleanField(
        required=False,
        default=True,
        help_text="Give it the operator's academic mirrors (pip, conda, Hugging Face, GitHub) "
        "in its environment; false: the tools' own defaults.",
    )
    region = StrictCharField(
        max_length=32,
        required=False,
        allow_blank=True,
        help_text="A region from GET /regions; omitted or blank: any (where there is room, or "
        "where the ordered disks are).",
    )
    idle_stop = IdleStopInput(
        required=False,
        allow_null=True,
        help_text=IDLE_STOP_HELP + " Omitted: the account's settings (GET /account/settings).",
    )


class PortOutput(serializers.Serializer[Mapping[str, object]]):
    port = serializers.IntegerField()
    url = serializers.CharField(
        help_text="Its HTTPS address; the owner's console sign-in opens it."
    )


class PortsInput(InputSerializer):
    ports = serializers.ListField(
        child=serializers.IntegerField(),
        help_text=f"Every HTTP port to serve besides Jupyter's (at most {MAX_PORTS}; not 22 or "
        "8888); the list replaces the previous one.",
    )


class PortsOutput(serializers.Serializer[Mapping[str, object]]):
    ports = PortOutput(many=True)


class ShareCreateInput(InputSerializer):
    port = serializers.IntegerField(help_text="A served port: 8888 (Jupyter) or a declared one.")


class ShareOutput(serializers.ModelSerializer[PortShare]):
    class Meta:
        model = PortShare
        fields = ["id", "port", "created_at"]


class ShareCreatedOutput(serializers.ModelSerializer[PortShare]):
    url = serializers.SerializerMethodField(
        help_text="The link, shown this once: whoever holds it can open the port until revoked."
    )

    class Meta:
        model = PortShare
        fields = ["id", "port", "created_at", "url"]

    def get_url(self, obj: PortShare) -> str:
        return str(self.context["url"])


class SshOutput(serializers.Serializer[Mapping[str, object]]):
    host = serializers.CharField()
    port = serializers.IntegerField()
    user = serializers.CharField()
    command = serializers.CharField()
    host_key_fingerprint = serializers.CharField(
        allow_null=True,
        help_text="The instance's SSH host key, as `ssh-keygen -l` prints it (SHA256:…): check "
        "it against what ssh shows on the first connection.",
    )


class SystemDiskOutput(serializers.Serializer[Mapping[str, object]]):
    size_gb = serializers.IntegerField(help_text="Its size: the offering's, free of charge.")
    used_gb = serializers.IntegerField(
        allow_null=True, help_text="How much of it is used, where the cluster reports it."
    )


# The readers below take an Instance or an instance_page row shaped like one (SHAPE): Any.
def _ssh(obj: Any) -> dict[str, Any] | None:
    if obj.status != "running" or not obj.ssh_port:
        return None
    host = settings.SSH_GATEWAY_HOST
    return {
        "host": host,
        "port": obj.ssh_port,
        "user": "root",
        "command": f"ssh -p {obj.ssh_port} root@{host}",
        "host_key_fingerprint": obj.ssh_host_key_fingerprint or None,
    }


def _node(obj: Any) -> str | None:
    return (
        obj.node.name
        if obj.node_id and obj.status in ("provisioning", "checking", "running")
        else None
    )


class Shaping(NamedTuple):
    """What every row of one answer shares: the queued ids' places in the line and the time
    zone its times are written in (DRF's: the current one; None without USE_TZ)."""

    positions: dict[str, int]
    tz: tzinfo | None


# The instance's API shape, once: every key and how it is read from an Instance (its stop
# policy and any monthly rental selected with it), or from a row of
# instances.selectors.instance_page (which reads exactly the attributes these use, listed in
# selectors.INSTANCE_COLUMNS). InstanceOutput's Meta.fields is this list; its declared
# fields document the same keys for the schema.
SHAPE: dict[str, Callable[[Any, Shaping], Any]] = {
    "id": lambda o, _s: o.id,
    "name": lambda o, _s: o.name,
    "status": lambda o, _s: o.status,
    "offering": lambda o, _s: o.offering_id,
    "image": lambda o, _s: o.image_id,
    "gpu_model": lambda o, _s: o.offering.gpu_model_id,
    "gpu_count": lambda o, _s: o.offering.gpu_count,
    "billing": lambda o, _s: o.billing,
    "price_per_hour_fen": lambda o, _s: _hour_price(o),
    "cpu_only_price_per_hour_fen": lambda o, _s: o.offering.cpu_only_price_per_hour_fen,
    "gpus_attached": lambda o, _s: o.holding.gpus_attached,
    "created_at": lambda o, s: _iso(o.created_at, s.tz),
    "started_at": lambda o, s: _iso(o.started_at, s.tz),
    "queue_position": lambda o, s: s.positions.get(o.id),
    "ssh": lambda o, _s: _ssh(o),
    "jupyter_url": lambda o, _s: jupyter_url(o),
    "ports": lambda o, _s: ports_output(o),
    "cost_fen": lambda o, _s: o.cost_fen,
    "disks": lambda o, _s: _disk_ids(o),
    "system_disk": lambda o, _s: {"size_gb": o.offering.system_disk_gb, "used_gb": None},
    "node": lambda o, _s: _node(o),
    "region": lambda o, _s: o.region_id,
    "error_message": lambda o, _s: o.error_message,
    "paid_until": lambda o, s: _iso(o.rental.paid_until if o.rental else None, s.tz),
    # an instance never billed monthly has no rental: it would renew (the default)
    "auto_renew": lambda o, _s: o.rental.auto_renew if o.rental else True,
    "auto_recover": lambda o, _s: o.auto_recover,
    "mirrors": lambda o, _s: o.mirrors,
    "idle_stop": lambda o, _s: _idle_stop(o),
    "idle_stop_due_at": lambda o, s: (
        _iso(o.stop_policy.idle_stop_due_at, s.tz) if o.status == "running" else None
    ),
    "stop_at": lambda o, s: _iso(o.stop_policy.stop_at, s.tz),
    "stop_reason": lambda o, _s: o.stop_reason or None,
}


def _hour_price(obj: Any) -> int | None:
    """What an hour of it costs by its billing: the spot price for a spot rental."""
    if obj.billing == BillingMode.SPOT:
        return cast(int | None, obj.offering.spot_price_per_hour_fen)
    return cast(int | None, obj.offering.price_per_hour_fen)


def _idle_stop(obj: Any) -> dict[str, int] | None:
    idle = idle_stop_of(obj)
    return idle.as_dict() if idle else None


class InstanceOutput(serializers.ModelSerializer[Instance]):
    """A rented instance: its status, what it runs on, how to reach it and what it cost."""

    # The keys and their values come from SHAPE. A list passes `queue_positions` in the
    # context, read for the whole page in one query; a single instance reads its own.

    offering = serializers.CharField(source="offering_id")
    image = serializers.CharField(source="image_id")
    gpu_model = serializers.CharField(source="offering.gpu_model_id")
    gpu_count = serializers.IntegerField(source="offering.gpu_count")
    price_per_hour_fen = serializers.IntegerField(
        source="offering.price_per_hour_fen",
        help_text="An hour of it by its billing (a spot rental's at the spot price).",
    )
    stop_reason = serializers.CharField(
        allow_null=True,
        help_text='Why the platform last stopped it: "preempted" (a spot rental taken back '
        "for a paying order, its disk kept); null otherwise.",
    )
    cpu_only_price_per_hour_fen = serializers.IntegerField(
        source="offering.cpu_only_price_per_hour_fen",
        allow_null=True,
        help_text="An hour of it in no-GPU mode (POST /instances/{id}/start with gpus 0); "
        "null: no-GPU mode is not offered for its offering.",
    )
    gpus_attached = serializers.BooleanField(
        source="holding.gpus_attached",
        help_text="Whether it runs with its GPUs (false: in no-GPU mode, billed at "
        "cpu_only_price_per_hour_fen); stopped, the mode it last ran in.",
    )
    queue_position = serializers.IntegerField(allow_null=True)
    ssh = SshOutput(allow_null=True, help_text="While running.")
    jupyter_url = serializers.CharField(
        allow_null=True, help_text="While running: JupyterLab through the HTTPS gateway."
    )
    ports = PortOutput(many=True, help_text="Declared HTTP ports and their gateway addresses.")
    disks = serializers.ListField(child=serializers.CharField())
    system_disk = SystemDiskOutput(
        help_text="What is installed outside the disks (/usr, /etc, /opt, /root, /home, /var) "
        "is kept here across stops, starts and moves to another node."
    )
    node = serializers.CharField(allow_null=True)
    region = serializers.CharField(
        allow_null=True,
        source="region_id",
        help_text="Where it runs (set when placed, or by the order); null: queued for any.",
    )
    # the moved fields keep their keys (instances.models: the rental, the stop policy)
    paid_until = serializers.DateTimeField(
        source="rental.paid_until", allow_null=True, help_text="Monthly: prepaid until."
    )
    auto_renew = serializers.BooleanField(
        source="rental.auto_renew", help_text="Monthly: renew at period end."
    )
    idle_stop = IdleStopOutput(allow_null=True, help_text=IDLE_STOP_HELP)
    idle_stop_due_at = serializers.DateTimeField(
        source="stop_policy.idle_stop_due_at",
        allow_null=True,
        help_text="Idle and warned: it stops at this time unless it gets busy or is kept running "
        "(POST /instances/{id}/keep-running).",
    )
    stop_at = serializers.DateTimeField(
        source="stop_policy.stop_at", allow_null=True, help_text="The scheduled stop."
    )

    _shaping: Shaping | None = None

    class Meta:
        model = Instance
        fields = list(SHAPE)

    def to_representation(self, obj: Any) -> dict[str, Any]:
        shaping = self._shaping
        if shaping is None:
            positions = self.context.get("queue_positions")
            tz = timezone.get_current_timezone() if settings.USE_TZ else None
            shaping = Shaping(queue_positions([obj]) if positions is None else positions, tz)
            if positions is not None:  # a page's: the same for each of its rows
                self._shaping = shaping
        return {key: read(obj, shaping) for key, read in SHAPE.items()}


def _disk_ids(obj: Any) -> list[str]:
    # a list view prefetches them (`attached_disks`); a single instance reads them
    prefetched = getattr(obj, "attached_disks", None)
    if prefetched is not None:
        return [disk.id for disk in prefetched]
    return list(obj.disks.order_by("name").values_list("id", flat=True))


_DATETIME = serializers.DateTimeField()  # one field, not one per value: lists call this a lot


def _iso(value: Any, tz: tzinfo | None) -> str | None:
    """DRF's DateTimeField.to_representation of `value`, the same string
    (tests/instances/test_instance_list.py compares them), given the zone DRF would use. A
    list calls this for every time of every row, so an aware datetime with ISO 8601 output
    takes DRF's own steps directly: to that zone, isoformat, +00:00 as Z. Anything else goes
    through the field."""
    if not value:
        return None
    if (
        tz is not None
        and isinstance(value, datetime)
        and value.utcoffset() is not None
        and api_settings.DATETIME_FORMAT == ISO_8601
    ):
        try:
            text = value.astimezone(tz).isoformat()
        except OverflowError:
            return _DATETIME.to_representation(value)  # DRF's error for it
        return text[:-6] + "Z" if text.endswith("+00:00") else text
    return _DATETIME.to_representation(value)


class InstanceEventOutput(serializers.ModelSerializer[InstanceEvent]):
    message = serializers.CharField(source="text", help_text="In the request's language.")
    text = serializers.CharField(
        source="told",
        help_text="As the console tells it, in the request's language: a Kubernetes event of a "
        "known reason as a sentence (its image, size and time read out of kubelet's message); "
        "any other step as `message`.",
    )

    class Meta:
        model = InstanceEvent
        fields = ["at", "status", "message", "text"]


class DiskAttachInput(InputSerializer):
    disk = StrictCharField(max_length=32)
    restart = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Confirm that a running instance restarts to change its disks.",
    )


class GpuSampleOutput(serializers.Serializer[Mapping[str, object]]):
    at = serializers.DateTimeField()
    util = serializers.IntegerField(allow_null=True)
    mem_used_mb = serializers.IntegerField(allow_null=True)
    temp_c = serializers.IntegerField(allow_null=True)
    power_w = serializers.FloatField(allow_null=True)


class GpuSeriesOutput(serializers.Serializer[Mapping[str, object]]):
    gpu = serializers.IntegerField(help_text="The GPU's index on its node.")
    uuid = serializers.CharField()
    samples = GpuSampleOutput(many=True, help_text="Oldest first.")


class InstanceMetricsOutput(serializers.Serializer[Mapping[str, object]]):
    results = GpuSeriesOutput(many=True, help_text="One series per GPU of the instance.")


class AutoStopSavingsOutput(serializers.Serializer[Mapping[str, object]]):
    since = serializers.DateTimeField(help_text="The start of this month (platform time zone).")
    saved_fen = serializers.IntegerField(
        help_text="For each automatic stop this month: the hourly price times the time until "
        "the next start (or now), at most 24 hours."
    )
    stops = serializers.IntegerField(help_text="Automatic stops this month.")


class InstanceCloneInput(DryRunInput):
    """POST /instances/{id}/clone: all optional; the rest is the source's (instances.clones)."""

    name = StrictCharField(
        max_length=100, required=False, allow_blank=True, help_text='Default: "NAME (clone)".'
    )
    offering = StrictCharField(
        max_length=32,
        required=False,
        help_text="Default: the source's. Its system disk and own disk must be no smaller.",
    )
    region = StrictCharField(
        max_length=32, required=False, help_text="The source's region (the default) only."
    )


class InstanceCloneOutput(serializers.Serializer[Any]):
    """A clone's order: the new instance, and how its disks' copy is made."""

    instance = InstanceOutput()
    cloned_from = serializers.CharField(help_text="The instance cloned (its id).")
    consistency = serializers.ChoiceField(
        choices=["crash_consistent", "consistent"],
        help_text="crash_consistent: the source is running, so its disks are copied as they "
        "are at that instant, like after a power cut (what its programs had not written out "
        "is not in the copy); consistent: the source is stopped.",
    )


class StartInput(DryRunInput):
    """The optional body of a start: without GPUs (no-GPU mode), and/or a dry run."""

    gpus = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        help_text="0: start in no-GPU mode (its disks, NAS, image and SSH, no GPU, at "
        "cpu_only_price_per_hour_fen); absent, null or its offering's GPU count: with its GPUs.",
    )
