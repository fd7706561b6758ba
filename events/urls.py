from django.urls import path

from events import views

app_name = "events"

urlpatterns = [
    path("webhooks/", views.webhooks_page, name="webhooks"),
]
