"""Thin Celery tasks of accounts: they take ids, re-read rows and call a service."""

import smtplib
from typing import Any

from celery import shared_task

from starverse.accounts.teams import invitation_email_send
from starverse.accounts.verification import verification_email_send

# A mail server that is down or drops the connection is tried again; a refusal is final.
RETRY_MAIL: dict[str, Any] = {
    "autoretry_for": (
        smtplib.SMTPConnectError,
        smtplib.SMTPServerDisconnected,
        ConnectionError,
        TimeoutError,
    ),
    "retry_backoff": 30,
    "retry_backoff_max": 900,
    "retry_jitter": True,
    "max_retries": 6,
}


@shared_task(acks_late=True, ignore_result=True, **RETRY_MAIL)
def send_verification_email(user_id: str, language: str) -> None:
    verification_email_send(user_id=user_id, language=language)


@shared_task(acks_late=True, ignore_result=True, **RETRY_MAIL)
def send_team_invitation(invitation_id: str, language: str) -> None:
    invitation_email_send(invitation_id=invitation_id, language=language)
