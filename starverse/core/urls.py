from django.urls import path

from datasets import views as datasets_views
from instances import disk_views
from starverse.core import views

app_name = "console"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    # The page lives in the datasets app; the navigation knows it as console:datasets.
    path("datasets/", datasets_views.dataset_list, name="datasets"),
    path("disks/", disk_views.disk_list, name="disks"),
]
