from typing import Any

from rest_framework import serializers

from events.choices import ChannelKind
from events.models import NotificationChannel, Webhook, WebhookDelivery
from starverse.core.api.serializers import InputSerializer, StrictCharField


class WebhookCreateInput(InputSerializer):
    url = StrictCharField(max_length=2000, help_text="An http(s) URL on a public address.")
    events = serializers.ListField(
        child=StrictCharField(max_length=64), help_text="Event types, e.g. job.failed."
    )
    description = StrictCharField(max_length=200, required=False, allow_blank=True)


class WebhookUpdateInput(InputSerializer):
    url = StrictCharField(max_length=2000, required=False)
    events = serializers.ListField(child=StrictCharField(max_length=64), required=False)
    description = StrictCharField(max_length=200, required=False, allow_blank=True)
    enabled = serializers.BooleanField(
        required=False, help_text="Enable again after it was disabled, or pause it."
    )


class WebhookOutput(serializers.ModelSerializer[Webhook]):
    events = serializers.ListField(child=serializers.CharField())
    previous_secret_valid_until = serializers.DateTimeField(
        source="previous_secret_expires_at",
        allow_null=True,
        help_text="During a rotation: until when the replaced secret still signs.",
    )

    class Meta:
        model = Webhook
        fields = [
            "id",
            "url",
            "events",
            "description",
            "status",
            "disabled_reason",
            "failing_since",
            "previous_secret_valid_until",
            "created_at",
        ]


class WebhookCreatedOutput(WebhookOutput):
    secret = serializers.CharField(help_text="Shown this once: keep it to verify deliveries.")

    class Meta(WebhookOutput.Meta):
        fields = [*WebhookOutput.Meta.fields, "secret"]


class WebhookSecretOutput(serializers.Serializer[dict[str, Any]]):
    id = serializers.CharField()
    secret = serializers.CharField(help_text="The new secret, shown this once.")
    previous_secret_valid_until = serializers.DateTimeField()


class DeliveryOutput(serializers.ModelSerializer[WebhookDelivery]):
    event = serializers.CharField(source="event_id", help_text="The event's id: the body's id.")
    type = serializers.CharField(source="event.type")
    response_body = serializers.CharField(help_text="The answer's first 1024 bytes.")

    class Meta:
        model = WebhookDelivery
        fields = [
            "id",
            "event",
            "type",
            "status",
            "manual",
            "attempts",
            "response_status",
            "duration_ms",
            "response_body",
            "error",
            "created_at",
            "last_attempt_at",
            "next_attempt_at",
        ]


class ChannelCreateInput(InputSerializer):
    kind = serializers.ChoiceField(choices=ChannelKind.choices)
    target = StrictCharField(
        max_length=2000,
        required=False,
        allow_blank=True,
        help_text="The bot's URL, or an e-mail address (default: yours).",
    )
    secret = StrictCharField(
        max_length=200, required=False, allow_blank=True, help_text="DingTalk's or Feishu's."
    )
    events = serializers.ListField(
        child=StrictCharField(max_length=64),
        required=False,
        help_text="Default: job.succeeded, job.failed, instance.idle_warning, balance.low, "
        "instance.preempted.",
    )
    language = serializers.ChoiceField(choices=["zh-hans", "en"], required=False)


class ChannelUpdateInput(InputSerializer):
    events = serializers.ListField(child=StrictCharField(max_length=64), required=False)
    enabled = serializers.BooleanField(required=False)
    language = serializers.ChoiceField(choices=["zh-hans", "en"], required=False)


class ChannelOutput(serializers.ModelSerializer[NotificationChannel]):
    events = serializers.ListField(child=serializers.CharField())
    signed = serializers.SerializerMethodField()

    class Meta:
        model = NotificationChannel
        fields = [
            "id",
            "kind",
            "target",
            "signed",
            "events",
            "language",
            "enabled",
            "last_sent_at",
            "last_error",
            "created_at",
        ]

    def get_signed(self, obj: NotificationChannel) -> bool:
        return bool(obj.secret)


class ChannelTestOutput(serializers.Serializer[dict[str, Any]]):
    event = serializers.CharField(help_text="The test event's id.")
