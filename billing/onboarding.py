"""Opening an account: the person and their tenant (starverse.accounts), the tenant's wallet in
the same transaction, so no account exists without its wallet; and the trial credit, which a
person earns by verifying their address, once per canonical address. It is billing's act because
the wallet and the grant are money; the account pages and routes call it from above
(docs/architecture.md)."""

from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext as _

from billing.choices import TrialStatus
from billing.models import LedgerTransaction
from billing.selectors import TrialState, trial_given_to_another, trial_state, wallet_for_tenant
from billing.services import trial_grant, wallet_create
from events.channels import email_defaults_give
from starverse.accounts.models import Tenant, User
from starverse.accounts.services import (
    email_verification_send,
    user_create,
    user_email_mark_verified,
)
from starverse.accounts.teams import team_tenant_create
from starverse.accounts.verification import already_verified, verification_user
from starverse.core.money import format_fen


def user_signup(*, email: str, password: str, ip: str | None = None) -> User:
    """A person's account and wallet, usable at once (top-ups, paid orders). The address is
    unique, so of concurrent sign-ups of one address one wins and the others get a Conflict.
    The trial waits for the address to be verified: a link is mailed after commit. With
    TRIAL_REQUIRES_VERIFICATION off it is granted here instead, still once per canonical
    address."""
    with transaction.atomic():
        user = user_create(email=email, password=password, ip=ip, is_staff=False)
        wallet = wallet_create(tenant_id=user.tenant_id)
        email_defaults_give(tenant_id=user.tenant_id, person=user)
        if settings.TRIAL_REQUIRES_VERIFICATION:
            email_verification_send(user=user)
        else:
            _trial_give(user, wallet.id)
    return user


def team_create(*, user: User, name: str) -> Tenant:
    """A team with its creator as owner and an empty wallet of its own: money reaches it by
    top-ups or by its people's transfers, never by a trial."""
    with transaction.atomic():
        team = team_tenant_create(user=user, name=name)
        wallet_create(tenant_id=team.pk)
        email_defaults_give(tenant_id=team.pk, person=user, team=True)
    return team


def user_create_operator(*, email: str, password: str) -> User:
    """An operator (staff and superuser) for the admin, with an empty wallet: no trial."""
    with transaction.atomic():
        user = user_create(email=email, password=password, ip=None, is_staff=True)
        wallet_create(tenant_id=user.tenant_id)
    return user


@dataclass(frozen=True)
class Verification:
    """What verifying an address did: whether this call verified it, the account's trial after
    it, and a sentence for the person saying so (the credit, or why there is none)."""

    verified_now: bool
    trial: TrialState
    message: str


def user_email_verify(*, user: User) -> Verification:
    """Mark the address verified and, the first time, grant the trial if the account earns it:
    not an operator's, and the first of its canonical address (the ledger key
    `trial:{canonical}` makes that hold between accounts verifying at the same moment).
    Verifying again changes nothing."""
    with transaction.atomic():
        verified_now = user_email_mark_verified(user=user)
        if verified_now:
            _trial_give(user, wallet_for_tenant(user.personal_tenant_id).id)
    trial = trial_state(user)
    return Verification(verified_now, trial, _verification_message(user, verified_now, trial))


def user_email_verify_token(*, token: str) -> Verification:
    """user_email_verify for the holder of a link's token; an expired, used or foreign token is
    refused with an error saying what to do."""
    verification = user_email_verify(user=verification_user(token))
    if not verification.verified_now:
        raise already_verified()  # the same link, used at the same moment
    return verification


def _trial_give(user: User, wallet_id: str) -> LedgerTransaction | None:
    if user.is_staff:
        return None
    if trial_given_to_another(canonical_email=user.canonical_email, wallet_id=wallet_id):
        return None
    return trial_grant(wallet_id=wallet_id, canonical_email=user.canonical_email)


def _verification_message(user: User, verified_now: bool, trial: TrialState) -> str:
    if not verified_now:
        return _("Your e-mail address was already verified.")
    if trial.status == TrialStatus.GRANTED:
        return _(
            "Your e-mail address is verified: %(amount)s of trial credit is on your balance."
        ) % {"amount": format_fen(trial.amount_fen)}
    if user.is_staff:
        return _("Your e-mail address is verified. Operator accounts receive no trial credit.")
    return _(
        "Your e-mail address is verified, but no trial credit was added: the trial is given "
        "once per mailbox, and an account with this address or another form of it (a +tag, "
        "dots in a Gmail name, googlemail.com) has already received it. Top up to rent GPUs."
    )
