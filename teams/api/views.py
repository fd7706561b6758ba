"""/api/v1/teams: teams, their members, invitations, budgets, audit log and transfers. A team
in the path must be one the caller belongs to (404 otherwise, as for every tenant object); a
token made for one team reaches that team only."""

import io
import json
from datetime import datetime
from typing import Any

from django.db.models import QuerySet
from django.http import HttpResponse
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import renderers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.onboarding import team_create
from instances.budgets import BudgetState, budget_set, budgets_of
from starverse.accounts.models import Invitation, Membership, Scope, Tenant, TenantKind
from starverse.accounts.teams import (
    acting_in,
    invitation_accept,
    invitation_create,
    invitation_link,
    invitation_revoke,
    team_of,
)
from starverse.core.addresses import client_ip
from starverse.core.api.auth import signed_in_user
from starverse.core.api.pagination import Pagination, WholeList
from starverse.core.api.schema import IDEMPOTENCY_KEY, errors, idempotency_key
from starverse.core.dates import parse_moment
from starverse.core.errors import InvalidInput, NotFound
from starverse.core.roles import require_manager
from starverse.core.spreadsheets import csv_writer
from teams.api import serializers as s
from teams.services import audit_events, membership_remove, membership_role_set, transfer_make


def team_in_path(request: Request, pk: str) -> Tenant:
    user = signed_in_user(request)
    if user.tenant_id != user.personal_tenant_id and pk != user.tenant_id:
        raise NotFound(_("No such team."))  # a team's token reaches its own team only
    return team_of(user, pk)


def _page(request: Request, view: APIView, rows: Any, serializer: Any, **context: Any) -> Response:
    paginator = Pagination()
    page: Any = paginator.paginate_queryset(rows, request, view=view)
    return paginator.get_paginated_response(serializer(page, many=True, context=context).data)


class TeamView(APIView):
    token_scope = Scope.ADMIN


class TeamListView(TeamView):
    pagination_class = Pagination
    person_keyed = ("POST",)  # a team is opened by a person, not by another team's token

    @extend_schema(operation_id="teams_list", responses=s.TeamOutput(many=True))
    def get(self, request: Request) -> Response:
        user = signed_in_user(request)
        roles = dict(Membership.objects.filter(user_id=user.pk).values_list("tenant_id", "role"))
        teams = Tenant.objects.filter(kind=TenantKind.TEAM, pk__in=list(roles)).order_by(
            "created_at", "id"
        )
        if user.tenant_id != user.personal_tenant_id:
            teams = teams.filter(pk=user.tenant_id)
        return _page(request, self, teams, s.TeamOutput, roles=roles)

    @extend_schema(
        operation_id="teams_create", request=s.TeamCreateInput, responses={201: s.TeamOutput}
    )
    def post(self, request: Request) -> Response:
        data = s.TeamCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        team = team_create(user=signed_in_user(request), name=data.validated_data["name"])
        body = s.TeamOutput(team, context={"roles": {team.pk: "owner"}}).data
        return Response(body, status=status.HTTP_201_CREATED)


class TeamDetailView(TeamView):
    @extend_schema(operation_id="teams_retrieve", responses={200: s.TeamOutput, **errors(404)})
    def get(self, request: Request, pk: str) -> Response:
        team = team_in_path(request, pk)
        role = acting_in(signed_in_user(request), team).acting_role
        return Response(s.TeamOutput(team, context={"roles": {team.pk: role}}).data)


class MemberListView(TeamView):
    pagination_class = Pagination

    @extend_schema(
        operation_id="teams_members_list",
        responses={200: s.MemberOutput(many=True), **errors(404)},
    )
    def get(self, request: Request, pk: str) -> Response:
        team = team_in_path(request, pk)
        rows = Membership.objects.filter(tenant=team).select_related("user").order_by("created_at")
        return _page(request, self, rows, s.MemberOutput)


class MemberView(TeamView):
    @extend_schema(
        operation_id="teams_members_update",
        request=s.MemberUpdateInput,
        responses={200: s.MemberOutput, **errors(404, 409)},
    )
    def patch(self, request: Request, pk: str, user: str) -> Response:
        team = team_in_path(request, pk)
        data = s.MemberUpdateInput(data=request.data)
        data.is_valid(raise_exception=True)
        membership, _revoked = membership_role_set(
            actor=signed_in_user(request),
            team=team,
            user_id=user,
            role=data.validated_data["role"],
            ip=client_ip(request),
        )
        return Response(s.MemberOutput(membership).data)

    @extend_schema(
        operation_id="teams_members_destroy",
        request=None,
        responses={204: None, **errors(404, 409)},
    )
    def delete(self, request: Request, pk: str, user: str) -> Response:
        team = team_in_path(request, pk)
        membership_remove(
            actor=signed_in_user(request), team=team, user_id=user, ip=client_ip(request)
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class InvitationListView(TeamView):
    pagination_class = Pagination

    @extend_schema(
        operation_id="teams_invitations_list",
        responses={200: s.InvitationOutput(many=True), **errors(404)},
    )
    def get(self, request: Request, pk: str) -> Response:
        team = team_in_path(request, pk)
        require_manager(acting_in(signed_in_user(request), team))
        return _page(request, self, Invitation.objects.filter(tenant=team), s.InvitationOutput)

    @extend_schema(
        operation_id="teams_invitations_create",
        request=s.InvitationCreateInput,
        responses={201: s.InvitationCreatedOutput, **errors(404, 409)},
    )
    def post(self, request: Request, pk: str) -> Response:
        team = team_in_path(request, pk)
        data = s.InvitationCreateInput(data=request.data)
        data.is_valid(raise_exception=True)
        invitation = invitation_create(
            actor=request.user, team=team, **data.validated_data, ip=client_ip(request)
        )
        context = {"link": invitation_link(invitation)}
        body = s.InvitationCreatedOutput(invitation, context=context).data
        return Response(body, status=status.HTTP_201_CREATED)


class InvitationView(TeamView):
    @extend_schema(
        operation_id="teams_invitations_destroy",
        request=None,
        responses={204: None, **errors(404, 409)},
    )
    def delete(self, request: Request, pk: str, invitation: str) -> Response:
        team = team_in_path(request, pk)
        found = Invitation.objects.filter(tenant=team, pk=invitation).first()
        if found is None:
            raise NotFound(_("No such invitation."))
        invitation_revoke(actor=request.user, invitation=found, ip=client_ip(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class InvitationAcceptView(TeamView):
    person_keyed = True  # the person joins

    @extend_schema(
        operation_id="teams_invitations_accept",
        request=None,
        responses={201: s.MemberOutput, **errors(400, 403, 409)},
        description="Join the team as the signed-in person the invitation was sent to "
        "(403 `wrong_account` otherwise), once their address is verified (403 "
        "`email_unverified`; opening the link in the console verifies it), never with a "
        "team's token (403 `wrong_team`); 409 "
        "`already_member` or `already_accepted`; 400 `link_expired` or `invalid_link`.",
    )
    def post(self, request: Request, token: str) -> Response:
        membership = invitation_accept(
            user=signed_in_user(request), token=token, ip=client_ip(request)
        )
        return Response(s.MemberOutput(membership).data, status=status.HTTP_201_CREATED)


def _budget_row(state: BudgetState) -> dict[str, Any]:
    return {
        "user": state.budget.user_id,
        "email": state.budget.user.email if state.budget.user else None,
        "monthly_fen": state.budget.monthly_fen,
        "spent_fen": state.spent_fen,
        "left_fen": state.left_fen,
    }


class BudgetView(TeamView):
    pagination_class = WholeList

    @extend_schema(
        operation_id="teams_budgets_list",
        responses={200: s.BudgetOutput(many=True), **errors(404)},
    )
    def get(self, request: Request, pk: str) -> Response:
        team = team_in_path(request, pk)
        rows = [
            _budget_row(state)
            for state in budgets_of(team.pk, viewer=acting_in(signed_in_user(request), team))
        ]
        return Response({"count": len(rows), "next": None, "previous": None, "results": rows})

    @extend_schema(
        operation_id="teams_budgets_update",
        request=s.BudgetInput,
        responses={200: s.BudgetOutput, **errors(404)},
        description="Set a member's monthly budget (`user`) or the team's (`user` null); "
        "owners only. 400 `budget_below_spent` when below what is spent this month.",
    )
    def put(self, request: Request, pk: str) -> Response:
        team = team_in_path(request, pk)
        data = s.BudgetInput(data=request.data)
        data.is_valid(raise_exception=True)
        state = budget_set(
            actor=acting_in(signed_in_user(request), team),
            team=team,
            user_id=data.validated_data.get("user") or None,
            monthly_fen=data.validated_data["monthly_fen"],
            ip=client_ip(request),
        )
        return Response(_budget_row(state))


class CsvRenderer(renderers.BaseRenderer):
    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None
    ) -> Any:
        return json.dumps(data, default=str)  # errors only: the log itself is written below


AUDIT_COLUMNS = ["at", "actor", "actor_email", "action", "object_type", "object_id", "ip", "data"]


def _when(request: Request, name: str) -> datetime | None:
    raw = request.query_params.get(name, "")
    if not raw:
        return None
    parsed = parse_moment(raw)
    if parsed is None:
        raise InvalidInput(
            _("%(name)s: a date (2026-12-01) or a time with zone (2026-12-01T08:00:00+08:00).")
            % {"name": name},
            code="invalid",
        )
    return parsed


class AuditView(TeamView):
    pagination_class = Pagination
    renderer_classes = [renderers.JSONRenderer, CsvRenderer]

    @extend_schema(
        operation_id="teams_audit_list",
        parameters=[
            OpenApiParameter("from", OpenApiTypes.DATETIME, description="At or after."),
            OpenApiParameter("to", OpenApiTypes.DATETIME, description="Before."),
            OpenApiParameter("actor", str, description="A user id."),
            OpenApiParameter("action", str, description="Such as instance.ordered."),
            OpenApiParameter("format", str, enum=["json", "csv"], description="csv: a download."),
        ],
        responses={
            200: s.AuditEventOutput(many=True),
            **errors(400, 404),
        },
        description="The team's audit log, newest first, for owners and admins; `?format=csv` "
        "(or Accept: text/csv) downloads all of it that the filters select as CSV.",
    )
    def get(self, request: Request, pk: str) -> Any:
        team = team_in_path(request, pk)
        events = audit_events(
            user=signed_in_user(request),
            team=team,
            since=_when(request, "from"),
            until=_when(request, "to"),
            actor=request.query_params.get("actor", ""),
            action=request.query_params.get("action", ""),
        )
        if request.accepted_renderer.format == "csv":
            return audit_csv(team, events)
        return _page(request, self, events, s.AuditEventOutput)


def audit_csv(team: Tenant, events: QuerySet[Any]) -> HttpResponse:
    out = io.StringIO()
    writer = csv_writer(out)
    writer.writerow(AUDIT_COLUMNS)
    for event in events.iterator():
        writer.writerow(
            [
                event.at.isoformat(),
                event.actor_id or "",
                event.actor.email if event.actor else "",
                event.action,
                event.object_type,
                event.object_id,
                event.ip or "",
                json.dumps(event.data, sort_keys=True),
            ]
        )
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="audit-{team.pk}.csv"'
    return response


class TransferView(TeamView):
    token_scope = Scope.BILLING
    person_keyed = True  # one side is always the person's own wallet

    @extend_schema(
        operation_id="teams_transfers_create",
        request=s.TransferInput,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: s.TransferOutput, **errors(402, 404, 409)},
        description="Move cash between your own wallet and the team's: `to_team` (any "
        "member), `from_team` (owners). Trial credit never moves; the same Idempotency-Key "
        "moves the money once (409 when reused for another amount).",
    )
    def post(self, request: Request, pk: str) -> Response:
        team = team_in_path(request, pk)
        data = s.TransferInput(data=request.data)
        data.is_valid(raise_exception=True)
        out, into = transfer_make(
            user=signed_in_user(request),
            team=team,
            amount_fen=data.validated_data["amount_fen"],
            direction=data.validated_data["direction"],
            idempotency_key=idempotency_key(request),
            ip=client_ip(request),
        )
        body = {
            "amount_fen": into.amount_fen,
            "direction": data.validated_data["direction"],
            "from_transaction": out.pk,
            "to_transaction": into.pk,
        }
        return Response(body, status=status.HTTP_201_CREATED)
