from django.urls import path

from console import views
from datasets import views as datasets_views

app_name = "console"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    # The page lives in the datasets app; the navigation knows it as console:datasets.
    path("datasets/", datasets_views.dataset_list, name="datasets"),
    path("disks/", views.disk_list, name="disks"),
]
