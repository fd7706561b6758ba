from django.urls import path

from jobs import views

app_name = "jobs"

urlpatterns = [
    path("console/jobs/", views.job_list, name="list"),
    path("console/jobs/new/", views.job_new, name="new"),
    path("console/jobs/<str:pk>/", views.job_detail, name="detail"),
    path("console/jobs/<str:pk>/logs/", views.job_logs, name="logs"),
    path("console/jobs/<str:pk>/cancel/", views.job_cancel_view, name="cancel"),
]
