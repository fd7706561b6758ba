from django.urls import path

from instances import gateway_views, views
from storage import views as disk_views

app_name = "instances"

urlpatterns = [
    path("rent/", views.rent, name="rent"),
    path("instances/", views.instance_list, name="list"),
    path("instances/<str:pk>/", views.instance_detail, name="detail"),
    path("instances/<str:pk>/terminal/", views.instance_terminal, name="terminal"),
    path("instances/<str:pk>/stop/", views.instance_stop_view, name="stop"),
    path("instances/<str:pk>/image/", views.instance_image_save_view, name="image-save"),
    path("images/", views.image_list, name="images"),
    path("images/<str:pk>/delete/", views.image_delete_view, name="image-delete"),
    path("instances/<str:pk>/start/", views.instance_start_view, name="start"),
    path("instances/<str:pk>/terminate/", views.instance_terminate_view, name="terminate"),
    path("instances/<str:pk>/clone/", views.instance_clone_view, name="clone"),
    path("instances/<str:pk>/auto-stop/", views.instance_schedule_view, name="schedule"),
    path("instances/<str:pk>/keep-running/", views.instance_keep_running_view, name="keep-running"),
    path("instances/<str:pk>/disks/", views.disk_attach_view, name="disk-attach"),
    path(
        "instances/<str:pk>/disks/<str:disk>/detach/",
        views.disk_detach_view,
        name="disk-detach",
    ),
    path("instances/<str:pk>/ports/", gateway_views.port_add_view, name="port-add"),
    path(
        "instances/<str:pk>/ports/<int:port>/remove/",
        gateway_views.port_remove_view,
        name="port-remove",
    ),
    path("instances/<str:pk>/shares/", gateway_views.share_create_view, name="share-create"),
    path(
        "instances/<str:pk>/shares/<str:share>/revoke/",
        gateway_views.share_revoke_view,
        name="share-revoke",
    ),
    path("disks/new/", disk_views.disk_create_view, name="disk-create"),
    path("disks/<str:pk>/resize/", disk_views.disk_resize_view, name="disk-resize"),
    path("disks/<str:pk>/delete/", disk_views.disk_delete_view, name="disk-delete"),
    path("nas/", disk_views.nas_size_view, name="nas-size"),
    path("nas/delete/", disk_views.nas_delete_view, name="nas-delete"),
]
