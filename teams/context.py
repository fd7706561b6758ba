from typing import Any

from django.http import HttpRequest

from starverse.accounts.teams import teams_of


def team_switch(request: HttpRequest) -> dict[str, Any]:
    """The console's switch at the top: the person's own account and each of their teams, and
    the one the console acts for ("" and "" for their own account)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    teams = teams_of(user)
    acting = user.acting_team_id or ""
    return {
        "team_switch": teams,
        "acting_team": acting,
        "acting_team_name": dict(teams).get(acting, ""),
    }
