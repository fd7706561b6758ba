from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle


class _PerAddress(SimpleRateThrottle):
    """Counts requests per client address; the console's forms use the same throttles."""

    def get_rate(self) -> str | None:
        # Read at request time, so SIGNUP_THROTTLE_RATE / settings overrides always apply.
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def get_cache_key(self, request, view) -> str:  # type: ignore[no-untyped-def]
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class SignupThrottle(_PerAddress):
    scope = "signup"


class LoginThrottle(_PerAddress):
    scope = "login"
