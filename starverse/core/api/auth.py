"""The signed-in user of an API request, typed as the project's User."""

from typing import TYPE_CHECKING

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
