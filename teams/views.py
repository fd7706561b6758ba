"""Console pages of teams: the switch at the top, the list of one's teams, a team's page
(members and their roles, invitations, budgets, a transfer form), its audit log with a CSV
download, and the page an invitation's link opens. Every act goes through the same services
as the API; their refusals are shown as messages."""

import uuid
from datetime import datetime, time, timedelta
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from billing.onboarding import team_create, user_email_verify
from billing.selectors import wallet_for_tenant
from instances.budgets import budget_set, budgets_of
from starverse.accounts.middleware import ACTING_TEAM_KEY
from starverse.accounts.models import (
    AuditEvent,
    Invitation,
    Membership,
    Role,
    Tenant,
    TenantKind,
    normalize_email,
)
from starverse.accounts.teams import (
    acting_in,
    invitation_accept,
    invitation_create,
    invitation_for_token,
    invitation_revoke,
    role_in,
    team_of,
)
from starverse.core.addresses import client_ip
from starverse.core.console import page_user
from starverse.core.dates import validate_day
from starverse.core.errors import NotFound, ServiceError
from starverse.core.money import MoneyParseError, parse_fen
from teams.api.views import audit_csv
from teams.auditlog import reading_for, sentence
from teams.services import (
    Revoked,
    audit_events,
    membership_remove,
    membership_role_set,
    transfer_make,
)


def _team(request: HttpRequest, pk: str) -> Tenant:
    """A team of the signed-in person's, else a 404 page as for every tenant object."""
    try:
        return team_of(page_user(request), pk)
    except NotFound:
        raise Http404 from None


@login_required
@require_POST
def switch(request: HttpRequest) -> HttpResponse:
    team_id = request.POST.get("team", "")
    if team_id and role_in(page_user(request), team_id) is not None:
        request.session[ACTING_TEAM_KEY] = team_id
    else:
        request.session.pop(ACTING_TEAM_KEY, None)
    return redirect("console:dashboard")


@login_required
def team_list(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        try:
            team = team_create(user=page_user(request), name=request.POST.get("name", ""))
        except ServiceError as error:
            messages.error(request, error.message)
        else:
            return redirect("teams:team", team.pk)
    roles = dict(
        Membership.objects.filter(user_id=request.user.pk).values_list("tenant_id", "role")
    )
    teams = Tenant.objects.filter(kind=TenantKind.TEAM, pk__in=list(roles)).order_by("name")
    rows = [(team, Role(roles[team.pk]).label) for team in teams]
    return render(request, "teams/teams.html", {"rows": rows, "active": "teams"})


@login_required
def team_page(request: HttpRequest, pk: str) -> HttpResponse:
    team = _team(request, pk)
    acting = acting_in(page_user(request), team)
    manager = acting.acting_role in (Role.OWNER, Role.ADMIN)
    context: dict[str, Any] = {
        "team": team,
        "role": acting.acting_role,
        "role_label": Role(acting.acting_role).label,
        "manager": manager,
        "members": Membership.objects.filter(tenant=team).select_related("user"),
        "invitations": Invitation.objects.filter(
            tenant=team, accepted_at__isnull=True, revoked_at__isnull=True
        )
        if manager
        else [],
        "budgets": budgets_of(team.pk, viewer=acting),
        "wallet": wallet_for_tenant(team.pk),
        "roles": Role.choices,
        "transfer_key": uuid.uuid4().hex,  # a double-submitted form moves the money once
        "active": "teams",
    }
    return render(request, "teams/team.html", context)


def _fen(request: HttpRequest, name: str) -> int:
    try:
        return parse_fen(request.POST.get(name, ""))
    except MoneyParseError:
        raise ServiceError(_("Enter an amount in yuan, such as 100 or 100.50.")) from None


def _revoked_text(done: str, revoked: Revoked) -> str:
    """What a removal or a demotion took away, for the owner or admin who did it."""
    if revoked == Revoked():
        return done
    return " ".join(
        [
            done,
            _(
                "Taken away with it: %(tokens)d API tokens of the team, %(links)d share links, "
                "%(keys)d endpoint keys; %(instances)d running instances they ordered no "
                "longer accept their SSH keys."
            )
            % {
                "tokens": revoked.tokens,
                "links": revoked.share_links,
                "keys": revoked.endpoint_keys,
                "instances": revoked.instances_rekeyed,
            },
        ]
    )


@login_required
@require_POST
def team_act(request: HttpRequest, pk: str, what: str) -> HttpResponse:
    """The team page's forms: invite, revoke, role, remove, budget, transfer."""
    user = page_user(request)
    team = _team(request, pk)
    ip = client_ip(request)
    post = request.POST
    try:
        if what == "invite":
            invitation_create(
                actor=user, team=team, email=post.get("email", ""), role=post.get("role", ""), ip=ip
            )
            messages.success(request, _("Invitation sent."))
        elif what == "revoke":
            invitation = Invitation.objects.filter(tenant=team, pk=post.get("invitation")).first()
            if invitation is not None:
                invitation_revoke(actor=user, invitation=invitation, ip=ip)
        elif what == "role":
            _membership, revoked = membership_role_set(
                actor=user,
                team=team,
                user_id=post.get("user", ""),
                role=post.get("role", ""),
                ip=ip,
            )
            messages.success(request, _revoked_text(_("Role changed."), revoked))
        elif what == "remove":
            revoked = membership_remove(actor=user, team=team, user_id=post.get("user", ""), ip=ip)
            if post.get("user") == user.pk:
                return redirect("teams:teams")
            messages.success(request, _revoked_text(_("Member removed."), revoked))
        elif what == "budget":
            budget_set(
                actor=acting_in(user, team),
                team=team,
                user_id=post.get("user") or None,
                monthly_fen=_fen(request, "amount"),
                ip=ip,
            )
            messages.success(request, _("Budget saved."))
        elif what == "transfer":
            transfer_make(
                user=user,
                team=team,
                amount_fen=_fen(request, "amount"),
                direction=post.get("direction", ""),
                idempotency_key=post.get("key", ""),
                ip=ip,
            )
            messages.success(request, _("Transferred."))
    except ServiceError as error:
        messages.error(request, error.message)
    return redirect("teams:team", team.pk)


class AuditFilter(forms.Form):
    """The audit page's filters, as the API's (`actor`, `action`, `from`, `to`): the dates are
    whole days in the viewer's zone, both included."""

    actor = forms.ChoiceField(label=gettext_lazy("Who"), required=False)
    action = forms.ChoiceField(label=gettext_lazy("What"), required=False)
    since = forms.DateField(
        label=gettext_lazy("From"),
        required=False,
        validators=[validate_day],
        widget=forms.DateInput(attrs={"type": "date"}),
    )
    until = forms.DateField(
        label=gettext_lazy("To"),
        required=False,
        validators=[validate_day],
        widget=forms.DateInput(attrs={"type": "date"}),
    )

    def __init__(self, data: Any, team: Tenant) -> None:
        super().__init__(data)
        events = AuditEvent.objects.filter(tenant=team)
        people = set(
            Membership.objects.filter(tenant=team).values_list("user_id", "user__email")
        ) | set(events.filter(actor__isnull=False).values_list("actor_id", "actor__email"))
        actor = self.fields["actor"]
        action = self.fields["action"]
        assert isinstance(actor, forms.ChoiceField) and isinstance(action, forms.ChoiceField)
        actor.choices = [("", _("Anyone")), *sorted(people, key=lambda p: p[1])]
        done = sorted(set(events.values_list("action", flat=True)))
        action.choices = [("", _("Any action")), *((a, a) for a in done)]

    def day_start(self, name: str, *, after: bool = False) -> datetime | None:
        day = self.cleaned_data.get(name)
        if day is None:
            return None
        start = datetime.combine(day + timedelta(days=1) if after else day, time())
        return timezone.make_aware(start)


@login_required
def audit_page(request: HttpRequest, pk: str) -> HttpResponse:
    team = _team(request, pk)
    filters = AuditFilter(request.GET, team)
    if not filters.is_valid():
        messages.error(request, " ".join(str(e) for es in filters.errors.values() for e in es))
        return redirect("teams:audit", team.pk)
    try:
        events = audit_events(
            user=page_user(request),
            team=team,
            since=filters.day_start("since"),
            until=filters.day_start("until", after=True),
            actor=filters.cleaned_data["actor"],
            action=filters.cleaned_data["action"],
        )
    except ServiceError as error:
        messages.error(request, error.message)
        return redirect("teams:team", team.pk)
    if request.GET.get("format") == "csv":
        return audit_csv(team, events)
    query = request.GET.copy()
    query["format"] = "csv"
    shown = list(events.select_related("actor")[:200])
    reading = reading_for(page_user(request), team.pk, shown)
    context = {
        "team": team,
        "events": [(event, sentence(event, reading)) for event in shown],
        "filters": filters,
        "csv_query": query.urlencode(),
        "active": "teams",
    }
    return render(request, "teams/audit.html", context)


def invitation_accept_page(request: HttpRequest, token: str) -> HttpResponse:
    """The e-mailed link. Signed in: join. Not signed in: what the invitation is, with a
    sign-up (the address filled in) and a log-in that both come back here."""
    if not request.user.is_authenticated:
        return _invitation_for_visitor(request, token)
    try:
        invitation = invitation_for_token(token)
    except ServiceError as error:
        messages.error(request, error.message)
        return redirect("teams:teams")
    if request.method == "POST":
        user = page_user(request)
        if normalize_email(user.email) == invitation.email and user.email_verified_at is None:
            user_email_verify(user=user)  # the e-mailed link is proof of the mailbox
        try:
            membership = invitation_accept(user=user, token=token, ip=client_ip(request))
        except ServiceError as error:
            messages.error(request, error.message)
        else:
            messages.success(request, _("You joined %(team)s.") % {"team": invitation.tenant.name})
            return redirect("teams:team", membership.tenant_id)
    return render(request, "teams/accept.html", {"invitation": invitation, "active": "teams"})


def _invitation_for_visitor(request: HttpRequest, token: str) -> HttpResponse:
    here = request.path
    try:
        invitation = invitation_for_token(token)
    except ServiceError as error:
        refused = {"error": error.message, "login_url": reverse("accounts:login")}
        return render(request, "teams/accept_visitor.html", refused, status=error.status_code)
    context: dict[str, Any] = {
        "invitation": invitation,
        "signup_url": reverse("accounts:signup")
        + "?"
        + urlencode({"next": here, "email": invitation.email}),
        "login_url": f"{reverse('accounts:login')}?{urlencode({'next': here})}",
    }
    return render(request, "teams/accept_visitor.html", context)
