from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.onboarding import user_email_verify_token, user_signup
from billing.selectors import TrialState, trial_state, wallet_for_tenant
from starverse.accounts.api import serializers as s
from starverse.accounts.models import ApiToken, Scope, SshKey, Tenant, User
from starverse.accounts.selectors import (
    recovery_codes_left,
    totp_device_confirmed,
    two_factor_required_for_login,
    user_settings,
)
from starverse.accounts.services import (
    TokenCaps,
    email_verification_send,
    ssh_key_add,
    ssh_key_delete,
    token_caps_change,
    token_create,
    token_revoke,
    user_settings_update,
)
from starverse.accounts.throttles import LoginThrottle, SignupThrottle, VerifyEmailResendThrottle
from starverse.accounts.twofactor import token_login
from starverse.core.addresses import client_ip
from starverse.core.api.auth import signed_in_user
from starverse.core.api.schema import ERROR, errors
from starverse.core.api.views import TenantScopedViewSet
from starverse.core.roles import role_of


def trial_body(trial: TrialState) -> dict[str, Any]:
    return {"status": trial.status.value, "amount_fen": trial.amount_fen}


class SignupView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes = [SignupThrottle]

    @extend_schema(
        operation_id="auth_signup",
        request=s.SignupInput,
        responses={201: s.SignupOutput, **errors(409)},
    )
    def post(self, request: Request) -> Response:
        data = s.SignupInput(data=request.data)
        data.is_valid(raise_exception=True)
        user = user_signup(**data.validated_data, ip=client_ip(request))
        _token, plaintext = token_create(user=user, name=_("Sign-up token"), at_signup=True)
        body = {
            "user": s.UserOutput(user).data,
            "token": plaintext,
            "email_verified": user.email_verified_at is not None,
            "trial": trial_body(trial_state(user)),
        }
        return Response(body, status=status.HTTP_201_CREATED)


class VerifyEmailView(APIView):
    """Verify the account's address with the token of the e-mailed link (the last part of its
    path); the first verification grants the trial, once per canonical address. No credentials
    are needed: the token proves the address."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="auth_verify_email",
        request=s.VerifyEmailInput,
        responses={200: s.VerifyEmailOutput, **errors(409)},
    )
    def post(self, request: Request) -> Response:
        data = s.VerifyEmailInput(data=request.data)
        data.is_valid(raise_exception=True)
        verification = user_email_verify_token(token=data.validated_data["token"])
        return Response(
            {
                "email_verified": True,
                "trial": trial_body(verification.trial),
                "detail": verification.message,
            }
        )


class VerifyEmailResendView(APIView):
    """Mail a new verification link to the signed-in account's address (rate-limited per
    account, VERIFY_EMAIL_RESEND_RATE)."""

    throttle_classes = [VerifyEmailResendThrottle]

    @extend_schema(
        operation_id="auth_verify_email_resend",
        request=None,
        responses={202: s.VerifyEmailResendOutput, **errors(409)},
    )
    def post(self, request: Request) -> Response:
        user = signed_in_user(request)
        email_verification_send(user=user)
        body = {"sent_to": user.email, "expires_in_days": settings.EMAIL_VERIFICATION_DAYS}
        return Response(body, status=status.HTTP_202_ACCEPTED)


class TokenLoginView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes = [LoginThrottle]

    @extend_schema(
        operation_id="auth_token_create",
        description="A new token for an e-mail and password. An account with two-factor "
        "authentication also sends `otp`: without it the answer is 401 `otp_required`, with a "
        "wrong or already used code 401 `otp_invalid`. Wrong passwords and codes count toward "
        "the same lock-out as the console's log-in (429 `locked_out`). 403 `2fa_required`: "
        "the account must turn on two-factor authentication first (operators; everyone when "
        "REQUIRE_2FA_FOR_API_TOKENS is on). `team` and `scopes` as for POST /tokens: 404 for "
        "a team you are not a member of.",
        request=s.TokenLoginInput,
        responses={
            201: s.TokenCreatedOutput,
            **errors(401),
            403: OpenApiResponse(
                response=ERROR.ref,
                description="Two-factor authentication must be turned on first (`2fa_required`).",
            ),
            **errors(404),
            429: OpenApiResponse(
                response=ERROR.ref,
                description="Too many requests from the address (`throttled`, with "
                "Retry-After), or too many failed log-ins for the account or from the address "
                "(`locked_out`).",
            ),
        },
    )
    def post(self, request: Request) -> Response:
        data = s.TokenLoginInput(data=request.data)
        data.is_valid(raise_exception=True)
        token, plaintext = token_login(
            request=request._request,
            email=data.validated_data["email"],
            password=data.validated_data["password"],
            otp=data.validated_data.get("otp") or None,
            name=data.validated_data.get("name", ""),
            team_id=data.validated_data.get("team") or None,
            scopes=data.validated_data.get("scopes"),
        )
        body = {
            "id": token.id,
            "name": token.name,
            "team": token.team_id,
            "scopes": token.scopes,
            "max_spend_fen": token.max_spend_fen,
            "max_spend_per_day_fen": token.max_spend_per_day_fen,
            "expires_at": token.expires_at,
            "token": plaintext,
        }
        return Response(body, status=status.HTTP_201_CREATED)


def acting_team(user: User) -> dict[str, str] | None:
    """The team a request acts for (its token's, or the console's switch), with the person's
    role in it; None for their own account."""
    team_id = user.acting_team_id
    if team_id is None:
        return None
    name = Tenant.objects.filter(pk=team_id).values_list("name", flat=True).first()
    return {"id": team_id, "name": name or "", "role": role_of(user)}


class MeView(APIView):
    @extend_schema(operation_id="me_retrieve", responses=s.MeOutput)
    def get(self, request: Request) -> Response:
        user = signed_in_user(request)
        wallet = wallet_for_tenant(user.tenant_id)
        balance = wallet.balance_shown()
        return Response(
            {
                "id": user.id,
                "email": user.email,
                "email_verified": user.email_verified_at is not None,
                "balance": balance,
                "trial": trial_body(trial_state(user)),
                "team": acting_team(user),
                "scopes": list(request.auth.scopes) if isinstance(request.auth, ApiToken) else None,
                "token_caps": _token_caps(request.auth),
            }
        )


def _token_caps(auth: Any) -> dict[str, Any] | None:
    """The request's token's spending caps and expiry (a tool that spends checks them)."""
    if not isinstance(auth, ApiToken):
        return None
    return {
        "max_spend_fen": auth.max_spend_fen,
        "max_spend_per_day_fen": auth.max_spend_per_day_fen,
        "expires_at": auth.expires_at,
    }


class AccountSettingsView(APIView):
    """The signed-in user's settings: the defaults of their orders (the idle auto-stop)."""

    person_keyed = True

    @extend_schema(operation_id="account_settings_retrieve", responses=s.SettingsOutput)
    def get(self, request: Request) -> Response:
        return Response(s.SettingsOutput(user_settings(signed_in_user(request))).data)

    @extend_schema(
        operation_id="account_settings_partial_update",
        request=s.SettingsInput,
        responses={200: s.SettingsOutput, **errors(400)},
    )
    def patch(self, request: Request) -> Response:
        serializer = s.SettingsInput(data=request.data)
        serializer.is_valid(raise_exception=True)
        row = user_settings_update(user=signed_in_user(request), **serializer.validated_data)
        return Response(s.SettingsOutput(row).data)


class MeTwoFactorView(APIView):
    person_keyed = True

    @extend_schema(operation_id="me_2fa_retrieve", responses=s.TwoFactorOutput)
    def get(self, request: Request) -> Response:
        user = signed_in_user(request)
        device = totp_device_confirmed(user)
        body = {
            "enabled": device is not None,
            "confirmed_at": device.confirmed_at if device else None,
            "recovery_codes_left": recovery_codes_left(user) if device else 0,
            "required_for_login": two_factor_required_for_login(user),
            "required_for_tokens": settings.REQUIRE_2FA_FOR_API_TOKENS,
        }
        return Response(s.TwoFactorOutput(body).data)


@extend_schema_view(
    list=extend_schema(operation_id="tokens_list"),
    retrieve=extend_schema(operation_id="tokens_retrieve"),
    destroy=extend_schema(operation_id="tokens_destroy"),
)
class TokenViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet[ApiToken],
):
    model = ApiToken
    owner_field = "user"
    serializer_class = s.TokenOutput
    token_scope = Scope.ADMIN

    def filter_queryset_extra(self, queryset: QuerySet[ApiToken]) -> QuerySet[ApiToken]:
        queryset = queryset.filter(revoked_at__isnull=True)
        auth = self.request.auth
        if isinstance(auth, ApiToken) and auth.team_id:
            return queryset.filter(team_id=auth.team_id)  # a team's token sees that team's only
        return queryset

    @extend_schema(
        operation_id="tokens_create",
        request=s.TokenCreateInput,
        responses={
            201: s.TokenCreatedOutput,
            **errors(409, also={404: "`team` is none of your teams."}),
            403: OpenApiResponse(
                response=ERROR.ref,
                description="A session request without its CSRF token; REQUIRE_2FA_FOR_API_"
                "TOKENS is on and the account has no two-factor authentication (`2fa_required`); "
                "or, made with a token, a scope that token lacks (`insufficient_scope`) or, "
                "with a team's token, another team or the personal account (`wrong_team`), or a "
                "cap or an expiry past that token's own (`token_cap`).",
            ),
        },
    )
    def create(self, request: Request) -> Response:
        data = self.parse(request, s.TokenCreateInput)
        minted_by = request.auth if isinstance(request.auth, ApiToken) else None
        # a token's new token is of the token's team unless the request names one
        team = data.get("team", minted_by.team_id if minted_by else None)
        token, plaintext = token_create(
            user=signed_in_user(request),
            name=data["name"],
            team_id=team or None,
            scopes=data.get("scopes"),
            ip=client_ip(request),
            minted_by=minted_by,
            caps=TokenCaps(
                max_spend_fen=data.get("max_spend_fen"),
                max_spend_per_day_fen=data.get("max_spend_per_day_fen"),
                expires_at=data.get("expires_at"),
            ),
        )
        body = {
            "id": token.id,
            "name": token.name,
            "team": token.team_id,
            "scopes": token.scopes,
            "max_spend_fen": token.max_spend_fen,
            "max_spend_per_day_fen": token.max_spend_per_day_fen,
            "expires_at": token.expires_at,
            "token": plaintext,
        }
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="tokens_partial_update",
        request=s.TokenCapsInput,
        responses={
            200: s.TokenOutput,
            **errors(400),
            403: OpenApiResponse(
                response=ERROR.ref,
                description="Made with a token that has a cap or an expiry: a cap raised or "
                "lifted, an expiry put later, or past that token's own (`token_cap`); or a "
                "scope that token lacks (`insufficient_scope`).",
            ),
        },
        description="Change the token's spending caps and expiry (`null` lifts one): lower or "
        "higher through a console session or an uncapped token; a capped token can only "
        "tighten them. Audited.",
    )
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        token = self.get_object()
        data = self.parse(request, s.TokenCapsInput)
        changed = token_caps_change(
            token=token,
            changes=dict(data),
            actor=signed_in_user(request),
            acting=request.auth if isinstance(request.auth, ApiToken) else None,
            ip=client_ip(request),
        )
        return Response(s.TokenOutput(changed).data)

    def perform_destroy(self, instance: ApiToken) -> None:
        token_revoke(token=instance, actor=self.request.user, ip=client_ip(self.request))


@extend_schema_view(
    list=extend_schema(operation_id="ssh_keys_list"),
    retrieve=extend_schema(operation_id="ssh_keys_retrieve"),
    destroy=extend_schema(operation_id="ssh_keys_destroy"),
)
class SshKeyViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet[SshKey],
):
    model = SshKey
    owner_field = "user"
    serializer_class = s.SshKeyOutput
    # a person's keys open their own instances as root: never a team token's to change or list
    person_keyed = True

    @extend_schema(
        operation_id="ssh_keys_create",
        request=s.SshKeyCreateInput,
        responses={201: s.SshKeyOutput, **errors(409)},
    )
    def create(self, request: Request) -> Response:
        data = self.parse(request, s.SshKeyCreateInput)
        key = ssh_key_add(
            user=signed_in_user(request), name=data.get("name", ""), public_key=data["public_key"]
        )
        return Response(self.output(key), status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance: SshKey) -> None:
        ssh_key_delete(key=instance)
