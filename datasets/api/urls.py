from django.urls import path

from datasets.api import views

urlpatterns = [
    path("datasets", views.DatasetListView.as_view(), name="datasets"),
    path("datasets/<slug:dataset_id>", views.DatasetDetailView.as_view(), name="dataset-detail"),
]
