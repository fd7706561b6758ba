"""Opening an account: the person and their tenant (starverse.accounts), the tenant's wallet and,
for a person who signs up, the trial credit on it, in one transaction, so no account exists
without its wallet. It is billing's act because the wallet and the grant are money; the
account pages and routes call it from above (docs/architecture.md)."""

from django.db import transaction

from billing.services import trial_grant, wallet_create
from starverse.accounts.models import User
from starverse.accounts.services import user_create


def user_signup(*, email: str, password: str, ip: str | None = None) -> User:
    """A person's account with the trial on its balance. The trial is keyed by the person
    (`trial:{user}`) and the address is unique, so concurrent sign-ups of one address make one
    account and one grant; the losers get a Conflict."""
    with transaction.atomic():
        user = user_create(email=email, password=password, ip=ip, is_staff=False)
        wallet = wallet_create(tenant_id=user.tenant_id)
        trial_grant(wallet_id=wallet.id, user_id=user.id)
    return user


def user_create_operator(*, email: str, password: str) -> User:
    """An operator (staff and superuser) for the admin, with an empty wallet: no trial."""
    with transaction.atomic():
        user = user_create(email=email, password=password, ip=None, is_staff=True)
        wallet_create(tenant_id=user.tenant_id)
    return user
