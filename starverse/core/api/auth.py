"""The signed-in user of an API request, typed as the project's User, and whether a route acts
on that person rather than the tenant the request acts for."""

from typing import TYPE_CHECKING, Any

from rest_framework.exceptions import NotAuthenticated
from rest_framework.request import Request

if TYPE_CHECKING:  # the core names the user model only for the type checker (import contracts)
    from starverse.accounts.models import User


def signed_in_user(request: Request) -> "User":
    """The user of a request that passed authentication. Every view that asks sits behind
    IsAuthenticated (the default permission), so an anonymous caller was already refused; if
    one gets here, the answer is the same 401 that permission would have given."""
    user = request.user
    if not user.is_authenticated:
        raise NotAuthenticated
    return user


def person_keyed(view: Any, method: str) -> bool:
    """Whether the view's `method` acts on the person rather than the tenant the request acts
    for (a team's token is refused there: starverse.accounts.permissions.PersonalRoute): the
    view's `person_keyed` is True (every method) or names the methods that do."""
    keyed = getattr(view, "person_keyed", ())
    return keyed is True or method in keyed
