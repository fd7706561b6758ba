from typing import Any

from rest_framework import serializers

from clusters.choices import Template
from instances.choices import InstanceStatus
from jobs.choices import JobBilling, JobStatus
from jobs.services import MAX_RESTARTS, MAX_TIME_LIMIT_MINUTES
from starverse.core.api.dryrun import DryRunOutput, dry_run_field
from starverse.core.api.serializers import InputSerializer, StrictCharField, StrictIntegerField


class JobCreateInput(InputSerializer):
    dry_run = dry_run_field()
    name = StrictCharField(max_length=90, required=False, allow_blank=True)
    image = StrictCharField(max_length=64, help_text="An image id (GET /images).")
    offering = StrictCharField(
        max_length=32, help_text="An offering id (GET /offerings): 1 to 8 GPUs, or a whole node."
    )
    command = StrictCharField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        help_text="A shell command line, run with bash -lc in /root. Give this or `script`.",
    )
    script = StrictCharField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        help_text="A bash script. Give this or `command`.",
    )
    node_count = StrictIntegerField(
        required=False,
        default=1,
        help_text="Nodes: 1, or 2 to 128 whole nodes of an 8-GPU bare-metal offering (one "
        "gang: the pre-flight check runs before the program starts).",
    )
    disks = serializers.ListField(
        child=StrictCharField(max_length=32),
        required=False,
        max_length=16,
        help_text="Cloud disks attached at their mount paths: free, yours, in one region "
        "(several nodes: rank i gets the i-th).",
    )
    nas = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Mount your NAS at /nas (default: if you have one).",
    )
    env = serializers.DictField(
        child=StrictCharField(allow_blank=True, trim_whitespace=False),
        required=False,
        help_text="Variables for the program (STARVERSE_* are the platform's).",
    )
    checkpoint_dir = StrictCharField(
        max_length=255,
        required=False,
        allow_blank=True,
        help_text="Given to the program as STARVERSE_CHECKPOINT_DIR (default "
        "/nas/checkpoints/<job id> with a NAS, else /root/data/checkpoints/<job id>).",
    )
    max_restarts = StrictIntegerField(
        required=False,
        default=3,
        min_value=0,
        max_value=MAX_RESTARTS,
        help_text="Runs again after the program's own failure (the platform's failures, a "
        "lost node, are always recovered and not counted here).",
    )
    time_limit_minutes = StrictIntegerField(
        required=False, allow_null=True, min_value=1, max_value=MAX_TIME_LIMIT_MINUTES
    )
    template = serializers.ChoiceField(
        choices=Template.choices,
        required=False,
        default=Template.NONE,
        help_text="A multi-node job's launcher, run on every rank with the framework's resume "
        "flags (Megatron-LM --load/--save, else --checkpoint-dir); `none`: the command as it "
        "is. A one-node job takes `none`.",
    )
    billing = serializers.ChoiceField(
        choices=JobBilling.choices,
        required=False,
        default=JobBilling.HOURLY,
        help_text="hourly, or spot: at the offering's spot price, taken back with notice when "
        "a paying order needs the GPUs; the job is then recovering and resumes from its "
        "checkpoint when GPUs free up.",
    )
    spot_max_wait_minutes = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="A spot job: fail, at no cost, if its ranks are not placed within this many "
        "minutes of the order (1 to 10080); omitted: wait as long as it takes.",
    )


class JobRankOutput(serializers.Serializer[dict[str, Any]]):
    rank = serializers.IntegerField()
    # A field named like BaseSerializer.instance (the object serialized).
    instance = serializers.CharField(help_text="The rank's instance id.")  # type: ignore[assignment]
    node = serializers.CharField(allow_null=True)
    status = serializers.ChoiceField(choices=InstanceStatus.choices)


class JobOutput(serializers.Serializer[dict[str, Any]]):
    id = serializers.CharField()
    name = serializers.CharField()
    status = serializers.ChoiceField(choices=JobStatus.choices)
    offering = serializers.CharField()
    image = serializers.CharField()
    node_count = serializers.IntegerField()
    command = serializers.CharField()
    script = serializers.CharField()
    env = serializers.DictField(child=serializers.CharField())
    checkpoint_dir = serializers.CharField()
    max_restarts = serializers.IntegerField()
    time_limit_minutes = serializers.IntegerField(allow_null=True)
    template = serializers.CharField()
    disks = serializers.ListField(child=serializers.CharField())
    nas = serializers.BooleanField()
    restarts = serializers.IntegerField(
        help_text="Pods that ran the program before the current one (its "
        "STARVERSE_RESTART_COUNT): after its own errors and after the platform's."
    )
    error_restarts = serializers.IntegerField(help_text="Of `restarts`, after its own errors.")
    exit_code = serializers.IntegerField(allow_null=True)
    message = serializers.CharField(help_text="The program's last lines when it failed.")
    cost_fen = serializers.IntegerField(help_text="Its running minutes so far, in fen.")
    ranks = JobRankOutput(many=True)
    notes = serializers.ListField(
        child=serializers.CharField(), help_text="What of a SkyPilot task it does not honour."
    )
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


class JobEventOutput(serializers.Serializer[Any]):
    at = serializers.DateTimeField()
    status = serializers.ChoiceField(choices=JobStatus.choices)
    text = serializers.CharField(help_text="In the reader's language.")


class JobDryRunOutput(DryRunOutput):
    notes = serializers.ListField(
        child=serializers.CharField(),
        help_text="What of a SkyPilot task the job would not honour, as its real order lists it.",
    )
