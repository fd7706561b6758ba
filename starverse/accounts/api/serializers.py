from rest_framework import serializers

from billing.choices import TrialStatus
from starverse.accounts.models import (
    IDLE_MINUTES_RANGE,
    IDLE_UTIL_PCT_RANGE,
    IDLE_WARN_MINUTES_RANGE,
    ApiToken,
    Role,
    Scope,
    SshKey,
    User,
    UserSettings,
)
from starverse.core.api.serializers import InputSerializer, StrictCharField, StrictIntegerField


class SignupInput(InputSerializer):
    email = StrictCharField(max_length=254)
    password = StrictCharField(max_length=128, trim_whitespace=False)


TEAM_HELP = (
    "A team the token acts for, by id or exact name (you must be its member); empty: your own "
    "account. Left out: your own account, or, made with a team's token, that team (a team's "
    "token makes tokens of its own team only: 403 wrong_team)."
)
SCOPES_HELP = (
    "Of read, instances, billing, admin; all of them when left out (made with a token: that "
    "token's, and never one it lacks: 403 insufficient_scope)."
)


def team_field() -> StrictCharField:
    return StrictCharField(max_length=200, required=False, allow_blank=True, help_text=TEAM_HELP)


def scopes_field() -> serializers.ListField:
    return serializers.ListField(
        child=serializers.ChoiceField(choices=Scope.choices),
        required=False,
        max_length=4,
        help_text=SCOPES_HELP,
    )


class TokenLoginInput(InputSerializer):
    email = StrictCharField(max_length=254)
    password = StrictCharField(max_length=128, trim_whitespace=False)
    name = StrictCharField(max_length=100, required=False, allow_blank=True)
    otp = StrictCharField(
        max_length=32,
        required=False,
        allow_blank=True,
        help_text="The 6-digit code of the authenticator app, or a recovery code: required "
        "when the account has two-factor authentication.",
    )
    team = team_field()
    scopes = scopes_field()


class VerifyEmailInput(InputSerializer):
    token = StrictCharField(max_length=500, help_text="The token of the e-mailed link.")


# A cap is a bigint column; past ¥10 billion it is no cap at all (null says so).
CAP_MOST_FEN = 10**12


def _cap_field(help_text: str) -> serializers.IntegerField:
    """A token's spending cap in fen: optional, null for none."""
    return serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=CAP_MOST_FEN, help_text=help_text
    )


class TokenCreateInput(InputSerializer):
    name = StrictCharField(max_length=100)
    team = team_field()
    scopes = scopes_field()
    max_spend_fen = _cap_field(
        "The most its orders may spend over its life (fen); `token_cap` past it."
    )
    max_spend_per_day_fen = _cap_field("The most its orders may spend in a day (fen).")
    expires_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="Refused from this moment on."
    )


class TokenCapsInput(InputSerializer):
    max_spend_fen = _cap_field("The most its orders may spend over its life (fen); null: no cap.")
    max_spend_per_day_fen = _cap_field(
        "The most its orders may spend in a day (fen); null: no cap."
    )
    expires_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="Refused from this moment on; null: never."
    )


class SshKeyCreateInput(InputSerializer):
    name = StrictCharField(max_length=100, required=False, allow_blank=True)
    public_key = StrictCharField(max_length=16384)


class UserOutput(serializers.ModelSerializer):
    class Meta:
        model = User
        fields = ["id", "email"]


class MeBalanceOutput(serializers.Serializer):
    cash_fen = serializers.IntegerField()
    promo_fen = serializers.IntegerField()
    pending_fen = serializers.IntegerField(
        help_text="GPU minutes used since their last hourly posting to the ledger: already "
        "taken off cash_fen, promo_fen and total_fen, posted by the hour and at every stop."
    )
    total_fen = serializers.IntegerField()


class TrialOutput(serializers.Serializer):
    status = serializers.ChoiceField(
        choices=TrialStatus.choices,
        help_text="granted; pending_verification (verify the e-mail address to receive it); "
        "not_eligible (the trial of this address, or of another form of it, went to another "
        "account, or the account is an operator's).",
    )
    amount_fen = serializers.IntegerField(
        help_text="Granted: what was credited. Pending: what verifying credits. Otherwise 0."
    )


class MeTeamOutput(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    role = serializers.ChoiceField(choices=Role.choices, help_text="Your role in it.")


class TokenCapsOutput(serializers.Serializer):
    max_spend_fen = serializers.IntegerField(allow_null=True)
    max_spend_per_day_fen = serializers.IntegerField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)


class MeOutput(serializers.Serializer):
    id = serializers.CharField()
    email = serializers.EmailField()
    email_verified = serializers.BooleanField()
    balance = MeBalanceOutput()
    trial = TrialOutput()
    team = MeTeamOutput(
        allow_null=True,
        help_text="The team the request acts for (the token's team, or the console's switch "
        "for a session); null: your own account.",
    )
    scopes = serializers.ListField(
        child=serializers.CharField(),
        allow_null=True,
        help_text="The token's scopes; null for a console session (it acts with your role).",
    )
    token_caps = TokenCapsOutput(
        allow_null=True,
        help_text="The token's spending caps (null: none) and expiry; null for a console session.",
    )


class TwoFactorOutput(serializers.Serializer):
    enabled = serializers.BooleanField(help_text="An authenticator app is set up and confirmed.")
    confirmed_at = serializers.DateTimeField(allow_null=True)
    recovery_codes_left = serializers.IntegerField()
    required_for_login = serializers.BooleanField(
        help_text="This account cannot log in without it (operators, REQUIRE_2FA_FOR_STAFF)."
    )
    required_for_tokens = serializers.BooleanField(
        help_text="Creating API tokens needs it (REQUIRE_2FA_FOR_API_TOKENS)."
    )


class SignupOutput(serializers.Serializer):
    user = UserOutput()
    token = serializers.CharField()
    email_verified = serializers.BooleanField()
    trial = TrialOutput()


class VerifyEmailOutput(serializers.Serializer):
    email_verified = serializers.BooleanField()
    trial = TrialOutput()
    detail = serializers.CharField(help_text="What happened, in words: the credit, or why none.")


class VerifyEmailResendOutput(serializers.Serializer):
    sent_to = serializers.EmailField()
    expires_in_days = serializers.IntegerField()


class TokenOutput(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "prefix",
            "team",
            "scopes",
            "created_at",
            "last_used_at",
            "max_spend_fen",
            "max_spend_per_day_fen",
            "expires_at",
        ]

    scopes = serializers.ListField(child=serializers.CharField())


class TokenCreatedOutput(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    team = serializers.CharField(allow_null=True, required=False)
    scopes = serializers.ListField(child=serializers.CharField(), required=False)
    max_spend_fen = serializers.IntegerField(allow_null=True, required=False)
    max_spend_per_day_fen = serializers.IntegerField(allow_null=True, required=False)
    expires_at = serializers.DateTimeField(allow_null=True, required=False)
    token = serializers.CharField(help_text="Shown once; store it now.")


class SshKeyOutput(serializers.ModelSerializer):
    class Meta:
        model = SshKey
        fields = ["id", "name", "key_type", "bits", "fingerprint", "public_key", "created_at"]


class SettingsOutput(serializers.ModelSerializer):
    class Meta:
        model = UserSettings
        fields = [
            "idle_stop_enabled",
            "idle_stop_util_pct",
            "idle_stop_minutes",
            "idle_warn_minutes",
        ]
        extra_kwargs = {
            "idle_stop_enabled": {"help_text": "New orders get an idle auto-stop by default."},
            "idle_stop_util_pct": {"help_text": "Idle: every GPU below this utilisation (%)."},
            "idle_stop_minutes": {"help_text": "Stop after this many minutes idle."},
            "idle_warn_minutes": {
                "help_text": "Warn (e-mail, console banner) this many minutes before the stop."
            },
        }


class SettingsInput(InputSerializer):
    idle_stop_enabled = serializers.BooleanField(required=False)
    idle_stop_util_pct = StrictIntegerField(
        required=False, min_value=IDLE_UTIL_PCT_RANGE[0], max_value=IDLE_UTIL_PCT_RANGE[1]
    )
    idle_stop_minutes = StrictIntegerField(
        required=False, min_value=IDLE_MINUTES_RANGE[0], max_value=IDLE_MINUTES_RANGE[1]
    )
    idle_warn_minutes = StrictIntegerField(
        required=False,
        min_value=IDLE_WARN_MINUTES_RANGE[0],
        max_value=IDLE_WARN_MINUTES_RANGE[1],
    )
