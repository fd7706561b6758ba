"""The API token a request acts through ("" for none: a console session, a worker), set by
the API's bearer authentication and cleared at every request's start and end
(starverse.core.logs), so that what a request orders can be counted against its token's
spending caps (compute.token_caps) without every path passing the token along."""

from contextvars import ContextVar

acting_token: ContextVar[str] = ContextVar("acting_token", default="")


def acting_token_set(token_id: str) -> None:
    acting_token.set(token_id)


def acting_token_id() -> str:
    return acting_token.get()
