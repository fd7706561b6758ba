from django.urls import path

from endpoints import views

app_name = "endpoints"

urlpatterns = [
    path("console/endpoints/", views.endpoint_list, name="list"),
    path("console/endpoints/new/", views.endpoint_new, name="new"),
    path("console/endpoints/<str:pk>/", views.endpoint_detail, name="detail"),
    path("console/endpoints/<str:pk>/scale/", views.endpoint_scale_view, name="scale"),
    path("console/endpoints/<str:pk>/delete/", views.endpoint_delete_view, name="delete"),
    path("console/endpoints/<str:pk>/keys/", views.key_create_view, name="key-create"),
    path(
        "console/endpoints/<str:pk>/keys/<str:key_id>/revoke/",
        views.key_revoke_view,
        name="key-revoke",
    ),
]
