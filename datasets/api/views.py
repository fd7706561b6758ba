"""The public pool's catalog: public reads, like the offerings and images."""

from django.db.models import QuerySet
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import generics
from rest_framework.permissions import AllowAny

from datasets.api.serializers import PublicDatasetOutput
from datasets.choices import DatasetKind
from datasets.models import PublicDataset
from datasets.selectors import public_datasets
from starverse.core.api.pagination import Pagination
from starverse.core.api.schema import errors
from starverse.core.errors import InvalidInput


class PublicCatalogView(generics.GenericAPIView[PublicDataset]):
    """No authentication: what the pool holds is no secret."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    serializer_class = PublicDatasetOutput

    def get_queryset(self) -> QuerySet[PublicDataset]:
        return public_datasets()  # active entries only: an inactive one is a 404


@extend_schema_view(
    get=extend_schema(
        operation_id="datasets_list",
        summary="Datasets and models of the public pool",
        parameters=[
            OpenApiParameter(
                "kind", OpenApiTypes.STR, enum=DatasetKind.values, description="Only this kind."
            ),
            OpenApiParameter(
                "q",
                OpenApiTypes.STR,
                description="Words that must all appear (any case) in the name, id, description "
                "or tags.",
            ),
        ],
        responses={200: PublicDatasetOutput(many=True), **errors(400)},
    )
)
class DatasetListView(PublicCatalogView, generics.ListAPIView[PublicDataset]):
    pagination_class = Pagination

    def get_queryset(self) -> QuerySet[PublicDataset]:
        kind = self.request.query_params.get("kind", "")
        if kind and kind not in DatasetKind.values:
            raise InvalidInput(
                _("kind must be one of: %(kinds)s.") % {"kinds": ", ".join(DatasetKind.values)}
            )
        return public_datasets(kind=kind or None, query=self.request.query_params.get("q", ""))


@extend_schema_view(
    get=extend_schema(
        operation_id="datasets_retrieve", summary="One dataset or model of the public pool"
    )
)
class DatasetDetailView(PublicCatalogView, generics.RetrieveAPIView[PublicDataset]):
    lookup_url_kwarg = "dataset_id"
