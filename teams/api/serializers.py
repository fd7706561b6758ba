from rest_framework import serializers

from starverse.accounts.models import AuditEvent, Invitation, Membership, Role, Tenant
from starverse.core.api.serializers import InputSerializer, StrictCharField, StrictIntegerField


class TeamCreateInput(InputSerializer):
    name = StrictCharField(max_length=200)


class TeamOutput(serializers.ModelSerializer):
    role = serializers.SerializerMethodField(help_text="Your role in the team.")

    class Meta:
        model = Tenant
        fields = ["id", "name", "role", "created_at"]

    def get_role(self, team: Tenant) -> str:
        return str(self.context["roles"].get(team.pk, ""))


class MemberUserOutput(serializers.Serializer):
    id = serializers.CharField()
    email = serializers.EmailField()


class MemberOutput(serializers.ModelSerializer):
    user = MemberUserOutput()

    class Meta:
        model = Membership
        fields = ["user", "role", "created_at"]


class MemberUpdateInput(InputSerializer):
    role = serializers.ChoiceField(choices=Role.choices)


class InvitationCreateInput(InputSerializer):
    email = StrictCharField(max_length=254)
    role = serializers.ChoiceField(choices=Role.choices, default=Role.MEMBER)


class InvitationOutput(serializers.ModelSerializer):
    status = serializers.SerializerMethodField()

    class Meta:
        model = Invitation
        fields = ["id", "email", "role", "status", "created_at", "expires_at", "accepted_at"]

    def get_status(self, invitation: Invitation) -> str:
        if invitation.accepted_at:
            return "accepted"
        if invitation.revoked_at:
            return "revoked"
        return "pending"


class InvitationCreatedOutput(InvitationOutput):
    link = serializers.SerializerMethodField(
        help_text="The link mailed to the address; it works only for that address's account."
    )

    class Meta(InvitationOutput.Meta):
        fields = [*InvitationOutput.Meta.fields, "link"]

    def get_link(self, invitation: Invitation) -> str:
        return str(self.context["link"])


class BudgetInput(InputSerializer):
    user = StrictCharField(
        max_length=32, allow_null=True, required=False, help_text="A member; null: the team's."
    )
    monthly_fen = StrictIntegerField(min_value=0)


class BudgetOutput(serializers.Serializer):
    user = serializers.CharField(allow_null=True, help_text="The member; null: the whole team.")
    email = serializers.CharField(allow_null=True)
    monthly_fen = serializers.IntegerField()
    spent_fen = serializers.IntegerField(help_text="Spent this calendar month.")
    left_fen = serializers.IntegerField()


class TransferInput(InputSerializer):
    amount_fen = StrictIntegerField(min_value=1)
    direction = serializers.ChoiceField(choices=["to_team", "from_team"])


class TransferOutput(serializers.Serializer):
    amount_fen = serializers.IntegerField()
    direction = serializers.CharField()
    from_transaction = serializers.CharField()
    to_transaction = serializers.CharField()


class AuditEventOutput(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_id", allow_null=True)
    actor_email = serializers.SerializerMethodField()

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "at",
            "actor",
            "actor_email",
            "action",
            "object_type",
            "object_id",
            "data",
            "ip",
        ]

    def get_actor_email(self, event: AuditEvent) -> str | None:
        return event.actor.email if event.actor else None
