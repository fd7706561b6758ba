from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle
from rest_framework.views import APIView

from starverse.core.api.throttling import ClientAddress, UserRateThrottle


class _PerAddress(ClientAddress, SimpleRateThrottle):
    """Counts requests per client address; the console's forms use the same throttles."""

    def get_rate(self) -> str | None:
        # Read at request time, so SIGNUP_THROTTLE_RATE / settings overrides always apply. (The
        # stubs type the rates as numbers; DRF's rates are strings such as "5/min".)
        rates: dict[str, str | None] = api_settings.DEFAULT_THROTTLE_RATES  # type: ignore[assignment]
        return rates.get(self.scope or "")

    def get_cache_key(self, request: Request, view: APIView) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class SignupThrottle(_PerAddress):
    scope = "signup"


class LoginThrottle(_PerAddress):
    scope = "login"


class VerifyEmailResendThrottle(UserRateThrottle):
    """Verification mails asked for again, per account (the API's and the dashboard's button);
    the API's throttle, so that its round trip checks the token's credentials too."""

    scope = "verify_email_resend"

    def get_rate(self) -> str | None:
        rates: dict[str, str | None] = api_settings.DEFAULT_THROTTLE_RATES  # type: ignore[assignment]
        return rates.get(self.scope or "")
