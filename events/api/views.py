"""The REST routes of webhooks and notification channels, per account and per team (a team's
by its owners and admins: members get 403, anyone else's object is a 404)."""

from typing import Any

from django.db.models import QuerySet
from django.utils.translation import gettext as _
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from events.api.serializers import (
    ChannelCreateInput,
    ChannelOutput,
    ChannelTestOutput,
    ChannelUpdateInput,
    DeliveryOutput,
    WebhookCreatedOutput,
    WebhookCreateInput,
    WebhookOutput,
    WebhookSecretOutput,
    WebhookUpdateInput,
)
from events.channels import channel_create, channel_delete, channel_test, channel_update
from events.models import NotificationChannel, Webhook, WebhookDelivery
from events.webhooks import (
    delivery_redeliver,
    require_webhook_manager,
    webhook_create,
    webhook_delete,
    webhook_rotate_secret,
    webhook_test,
    webhook_update,
)
from starverse.accounts.audit import audit_request
from starverse.core.api.auth import signed_in_user
from starverse.core.api.schema import errors
from starverse.core.api.views import TenantScopedViewSet
from starverse.core.errors import NotFound


class _ManagedViewSet(TenantScopedViewSet[Any]):
    """Every route, reads too, is the tenant's managers' (URLs and secrets reach outside)."""

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        if request.user.is_authenticated:
            require_webhook_manager(signed_in_user(request))


@extend_schema_view(
    list=extend_schema(operation_id="webhooks_list", responses=WebhookOutput(many=True)),
    retrieve=extend_schema(operation_id="webhooks_retrieve", responses=WebhookOutput),
)
class WebhookViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, _ManagedViewSet):
    """The acting account's or team's webhooks: URLs that receive signed events."""

    model = Webhook
    owner_field = "tenant"
    serializer_class = WebhookOutput

    @extend_schema(
        operation_id="webhooks_create",
        request=WebhookCreateInput,
        responses={201: WebhookCreatedOutput, **errors(400)},
    )
    def create(self, request: Request) -> Response:
        """Register a URL for the listed event types; the answer's secret is shown this once."""
        data = self.parse(request, WebhookCreateInput)
        made = webhook_create(
            user=signed_in_user(request),
            url=data["url"],
            events=data["events"],
            description=data.get("description", ""),
        )
        audit_request(request, "webhook.created", made.webhook, url=made.webhook.url)
        out = {**self.output(made.webhook), "secret": made.secret}
        return Response(out, status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="webhooks_partial_update",
        request=WebhookUpdateInput,
        responses={200: WebhookOutput, **errors(400)},
    )
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        webhook = self.get_object()
        data = self.parse(request, WebhookUpdateInput)
        webhook = webhook_update(user=signed_in_user(request), webhook=webhook, **data)
        audit_request(request, "webhook.changed", webhook, url=webhook.url)
        return Response(self.output(webhook))

    @extend_schema(operation_id="webhooks_destroy", responses={204: None})
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        webhook = self.get_object()
        audit_request(request, "webhook.deleted", webhook, url=webhook.url)
        webhook_delete(user=signed_in_user(request), webhook=webhook)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(operation_id="webhooks_deliveries_list", responses=DeliveryOutput(many=True))
    @action(detail=True, methods=["get"])
    def deliveries(self, request: Request, pk: str | None = None) -> Response:
        """The webhook's deliveries of the last 30 days, newest first."""
        rows: QuerySet[WebhookDelivery] = self.get_object().deliveries.select_related("event")
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(DeliveryOutput(page, many=True).data)

    @extend_schema(
        operation_id="webhooks_deliveries_redeliver",
        request=None,
        responses={202: DeliveryOutput, **errors(404)},
    )
    @action(
        detail=True,
        methods=["post"],
        url_path=r"deliveries/(?P<delivery_id>[A-Za-z0-9_]+)/redeliver",
    )
    def redeliver(self, request: Request, pk: str | None = None, delivery_id: str = "") -> Response:
        """Send the delivery's event again (same event id), as a new delivery."""
        webhook = self.get_object()
        delivery = webhook.deliveries.filter(pk=delivery_id).first()
        if delivery is None:
            raise NotFound(_("This webhook has no such delivery."), code="no_delivery")
        again = delivery_redeliver(user=signed_in_user(request), delivery=delivery)
        return Response(DeliveryOutput(again).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(operation_id="webhooks_test", request=None, responses={202: DeliveryOutput})
    @action(detail=True, methods=["post"])
    def test(self, request: Request, pk: str | None = None) -> Response:
        """Send a `webhook.test` event to this webhook now (by a worker)."""
        delivery = webhook_test(user=signed_in_user(request), webhook=self.get_object())
        return Response(DeliveryOutput(delivery).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        operation_id="webhooks_rotate_secret", request=None, responses={200: WebhookSecretOutput}
    )
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request: Request, pk: str | None = None) -> Response:
        """A new secret signs from now on; the old one also signs for 24 hours."""
        webhook = self.get_object()
        secret = webhook_rotate_secret(user=signed_in_user(request), webhook=webhook)
        webhook.refresh_from_db()
        audit_request(request, "webhook.secret_rotated", webhook, url=webhook.url)
        valid_until = webhook.previous_secret_expires_at
        out = {"id": webhook.id, "secret": secret, "previous_secret_valid_until": valid_until}
        return Response(WebhookSecretOutput(out).data)


@extend_schema_view(
    list=extend_schema(operation_id="notification_channels_list"),
    retrieve=extend_schema(operation_id="notification_channels_retrieve"),
)
class ChannelViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, _ManagedViewSet):
    """Where the account or team hears about events in words: e-mail, WeCom, DingTalk, Feishu."""

    model = NotificationChannel
    owner_field = "tenant"
    serializer_class = ChannelOutput

    @extend_schema(
        operation_id="notification_channels_create",
        request=ChannelCreateInput,
        responses={201: ChannelOutput, **errors(400)},
    )
    def create(self, request: Request) -> Response:
        data = self.parse(request, ChannelCreateInput)
        channel = channel_create(user=signed_in_user(request), **data)
        audit_request(request, "channel.created", channel, kind=channel.kind)
        return Response(self.output(channel), status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="notification_channels_partial_update",
        request=ChannelUpdateInput,
        responses={200: ChannelOutput, **errors(400)},
    )
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        channel = self.get_object()
        data = self.parse(request, ChannelUpdateInput)
        channel = channel_update(user=signed_in_user(request), channel=channel, **data)
        return Response(self.output(channel))

    @extend_schema(operation_id="notification_channels_destroy", responses={204: None})
    def destroy(self, request: Request, pk: str | None = None) -> Response:
        channel = self.get_object()
        audit_request(request, "channel.deleted", channel, kind=channel.kind)
        channel_delete(user=signed_in_user(request), channel=channel)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        operation_id="notification_channels_test", request=None, responses={202: ChannelTestOutput}
    )
    @action(detail=True, methods=["post"])
    def test(self, request: Request, pk: str | None = None) -> Response:
        """Send a test notice (by a worker); its outcome shows as last_sent_at / last_error."""
        event_id = channel_test(user=signed_in_user(request), channel=self.get_object())
        out = ChannelTestOutput({"event": event_id}).data
        return Response(out, status=status.HTTP_202_ACCEPTED)
