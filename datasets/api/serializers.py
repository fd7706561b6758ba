from rest_framework import serializers

from datasets.models import PublicDataset
from starverse.core.api.serializers import LocalizedField


class PublicDatasetOutput(serializers.ModelSerializer):
    path = serializers.CharField(
        read_only=True, help_text="Where it is mounted, read-only, in every instance."
    )
    homepage = serializers.URLField(source="homepage_or_none", read_only=True, allow_null=True)
    tags = serializers.ListField(child=serializers.CharField(), source="tag_list", read_only=True)
    description = LocalizedField(help_text="In the request's language (Accept-Language).")

    class Meta:
        model = PublicDataset
        fields = [
            "id",
            "name",
            "kind",
            "version",
            "size_bytes",
            "licence",
            "description",
            "path",
            "homepage",
            "tags",
        ]
