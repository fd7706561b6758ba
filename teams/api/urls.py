from django.urls import path

from teams.api import views

ID = "<str:pk>"

urlpatterns = [
    path("teams", views.TeamListView.as_view(), name="teams"),
    path(
        "teams/invitations/<str:token>/accept",
        views.InvitationAcceptView.as_view(),
        name="team-invitation-accept",
    ),
    path(f"teams/{ID}", views.TeamDetailView.as_view(), name="team"),
    path(f"teams/{ID}/members", views.MemberListView.as_view(), name="team-members"),
    path(f"teams/{ID}/members/<str:user>", views.MemberView.as_view(), name="team-member"),
    path(f"teams/{ID}/invitations", views.InvitationListView.as_view(), name="team-invitations"),
    path(
        f"teams/{ID}/invitations/<str:invitation>",
        views.InvitationView.as_view(),
        name="team-invitation",
    ),
    path(f"teams/{ID}/budgets", views.BudgetView.as_view(), name="team-budgets"),
    path(f"teams/{ID}/audit", views.AuditView.as_view(), name="team-audit"),
    path(f"teams/{ID}/transfers", views.TransferView.as_view(), name="team-transfers"),
]
