from rest_framework import serializers

from starverse.accounts.models import ApiToken, SshKey, User
from starverse.core.api.serializers import InputSerializer, StrictCharField


class SignupInput(InputSerializer):
    email = StrictCharField(max_length=254)
    password = StrictCharField(max_length=128, trim_whitespace=False)


class TokenLoginInput(InputSerializer):
    email = StrictCharField(max_length=254)
    password = StrictCharField(max_length=128, trim_whitespace=False)
    name = StrictCharField(max_length=100, required=False, allow_blank=True)


class TokenCreateInput(InputSerializer):
    name = StrictCharField(max_length=100)


class SshKeyCreateInput(InputSerializer):
    name = StrictCharField(max_length=100, required=False, allow_blank=True)
    public_key = StrictCharField(max_length=16384)


class UserOutput(serializers.ModelSerializer):
    class Meta:
        model = User
        fields = ["id", "email"]


class MeBalanceOutput(serializers.Serializer):
    cash_fen = serializers.IntegerField()
    promo_fen = serializers.IntegerField()
    total_fen = serializers.IntegerField()


class MeOutput(serializers.Serializer):
    id = serializers.CharField()
    email = serializers.EmailField()
    balance = MeBalanceOutput()


class SignupOutput(serializers.Serializer):
    user = UserOutput()
    token = serializers.CharField()


class TokenOutput(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "created_at", "last_used_at"]


class TokenCreatedOutput(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    token = serializers.CharField(help_text="Shown once; store it now.")


class SshKeyOutput(serializers.ModelSerializer):
    class Meta:
        model = SshKey
        fields = ["id", "name", "key_type", "bits", "fingerprint", "public_key", "created_at"]
