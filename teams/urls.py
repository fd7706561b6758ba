from django.urls import path

from teams import views

app_name = "teams"

urlpatterns = [
    path("", views.team_list, name="teams"),
    path("switch/", views.switch, name="switch"),
    path("invitations/<str:token>/", views.invitation_accept_page, name="invitation_accept"),
    path("<str:pk>/", views.team_page, name="team"),
    path("<str:pk>/act/<str:what>/", views.team_act, name="act"),
    path("<str:pk>/audit/", views.audit_page, name="audit"),
]
