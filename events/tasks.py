"""Thin tasks of the events app: fan an event out, attempt a delivery, tell a channel, and the
beat's sweeps (retries due, fan-outs the broker lost, deliveries past their 30 days)."""

from celery import shared_task

from events import channels, delivery


@shared_task(acks_late=True, ignore_result=True)
def fan_out(event_id: str) -> None:
    delivery.fan_out(event_id)


@shared_task(acks_late=True, ignore_result=True)
def deliver(delivery_id: str) -> None:
    delivery.deliver(delivery_id)


@shared_task(acks_late=True, ignore_result=True)
def notify(channel_id: str, event_id: str) -> None:
    channels.notify(channel_id, event_id)


@shared_task(acks_late=True, ignore_result=True)
def mail_webhook_disabled(webhook_id: str) -> None:
    delivery.webhook_disabled_mail(webhook_id)


@shared_task(ignore_result=True)
def deliver_due() -> None:
    delivery.deliveries_due()


@shared_task(ignore_result=True)
def fan_out_missed() -> None:
    delivery.fan_out_missed()


@shared_task(ignore_result=True)
def prune_deliveries() -> None:
    delivery.deliveries_prune()
