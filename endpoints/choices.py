from django.db import models
from django.utils.translation import gettext_lazy as _


class EndpointStatus(models.TextChoices):
    PROVISIONING = "provisioning", _("Provisioning")
    RUNNING = "running", _("Running")
    SCALED_TO_ZERO = "scaled_to_zero", _("Scaled to zero")
    UPDATING = "updating", _("Updating")
    FAILED = "failed", _("Failed")
    DELETING = "deleting", _("Deleting")
    DELETED = "deleted", _("Deleted")


class Engine(models.TextChoices):
    TENSORRT_LLM = "tensorrt-llm", _("TensorRT-LLM")
    VLLM = "vllm", _("vLLM")


class SourceKind(models.TextChoices):
    DISK = "disk", _("Cloud disk")
    NAS = "nas", _("Shared NAS")
    DATASET = "dataset", _("Public pool model")


S = EndpointStatus
# Where the platform still keeps objects on the cluster for the endpoint.
LIVE = (S.PROVISIONING, S.RUNNING, S.SCALED_TO_ZERO, S.UPDATING)
ENDED = (S.DELETING, S.DELETED)
TRANSITIONS: dict[str, tuple[str, ...]] = {
    S.PROVISIONING: (S.RUNNING, S.SCALED_TO_ZERO, S.FAILED, S.DELETING),
    S.RUNNING: (S.SCALED_TO_ZERO, S.UPDATING, S.FAILED, S.DELETING),
    S.SCALED_TO_ZERO: (S.RUNNING, S.UPDATING, S.PROVISIONING, S.FAILED, S.DELETING),
    S.UPDATING: (S.RUNNING, S.SCALED_TO_ZERO, S.FAILED, S.DELETING),
    S.FAILED: (S.DELETING, S.UPDATING, S.PROVISIONING),
    S.DELETING: (S.DELETED,),
    S.DELETED: (),
}
