from typing import Any, ClassVar

from django.contrib.auth.models import AbstractBaseUser, BaseUserManager, PermissionsMixin
from django.db import models
from django.db.models.functions import Lower, Trim
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from starverse.core.ids import PublicIdField


def normalize_email(email: str) -> str:
    """One address, one account: surrounding spaces dropped and the whole address lower-cased."""
    return email.strip().lower()


class TenantKind(models.TextChoices):
    PERSONAL = "personal", _("Personal account")
    TEAM = "team", _("Team")


class Role(models.TextChoices):
    """What a member may do in a team (starverse.core.roles holds the rules)."""

    OWNER = "owner", _("Owner")
    ADMIN = "admin", _("Admin")
    MEMBER = "member", _("Member")
    BILLING = "billing", _("Billing")


class Scope(models.TextChoices):
    """What an API token may do (starverse.accounts.permissions)."""

    READ = "read", _("Read")
    INSTANCES = "instances", _("Instances")
    BILLING = "billing", _("Billing")
    ADMIN = "admin", _("Admin")


def all_scopes() -> list[str]:
    return [scope.value for scope in Scope]


class Tenant(models.Model):
    """A billing and isolation boundary: owns a wallet and, on the cluster, one namespace.
    Every sign-up creates a personal tenant, whose only member (implicitly, the owner) is that
    person; a team is a tenant of kind team whose people are its Membership rows."""

    id = PublicIdField(prefix="tnt")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=TenantKind.choices, default=TenantKind.PERSONAL)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.name


class UserManager(BaseUserManager["User"]):
    """Finds users by their normalised address. It creates none: an account comes with a
    tenant and a wallet, so starverse.accounts.services makes them (sign-up, operators)."""

    def get_by_natural_key(self, username: str | None) -> "User":
        return self.get(email=normalize_email(username or ""))


class User(AbstractBaseUser, PermissionsMixin):
    """A person who signs in. The e-mail is stored normalised and is unique, which is what makes
    sign-up happen once per address even under races. Its canonical form (canonical.py) is not
    unique: the aliases of one mailbox are separate accounts, but the trial credit goes to one
    canonical address once, and only after the address is verified (email_verified_at)."""

    id = PublicIdField(prefix="usr")
    email = models.EmailField(_("email"), max_length=254, unique=True)
    canonical_email = models.CharField(
        max_length=320,
        db_index=True,
        editable=False,
        help_text="The mailbox the address reaches (+tags, Gmail's dots and alias domains "
        "folded); the trial credit is given once per canonical address.",
    )
    email_verified_at = models.DateTimeField(null=True, blank=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="members")
    is_staff = models.BooleanField(default=False)
    is_active = models.BooleanField(default=True)
    date_joined = models.DateTimeField(default=timezone.now)
    signup_ip = models.GenericIPAddressField(null=True, blank=True)

    USERNAME_FIELD = "email"
    EMAIL_FIELD = "email"
    REQUIRED_FIELDS: ClassVar[list[str]] = []

    objects = UserManager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(email=Lower(Trim("email"))),
                name="user_email_normalized",
            )
        ]

    def __str__(self) -> str:
        return self.email

    # The acting tenant: a request for a team (the token's team, the console's switch) sets it
    # with act_for, after which tenant_id is the team's for every access helper and service.
    # The person's own tenant is kept aside, and save() always writes that one.
    acting_role: str = Role.OWNER

    @property
    def personal_tenant_id(self) -> str:
        return self.__dict__.get("_personal_tenant_id") or self.tenant_id

    @property
    def acting_team_id(self) -> str | None:
        """The team this request acts for; None for the person's own account."""
        return self.tenant_id if self.tenant_id != self.personal_tenant_id else None

    def act_for(self, tenant_id: str, role: str) -> None:
        """Act for this tenant, with this role in it, until the object is dropped."""
        self.__dict__.setdefault("_personal_tenant_id", self.tenant_id)
        self.tenant_id = tenant_id
        self.acting_role = role

    def save(self, *args: Any, **kwargs: Any) -> None:
        acting = self.tenant_id
        personal = self.personal_tenant_id
        if acting == personal:
            super().save(*args, **kwargs)
            return
        self.tenant_id = personal
        try:
            super().save(*args, **kwargs)
        finally:
            self.tenant_id = acting


class Membership(models.Model):
    """A person's place in a team, with their role. A personal tenant has no rows: its person
    is its owner implicitly."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey("User", on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user"], name="membership_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} {self.role} of {self.tenant_id}"


class Invitation(models.Model):
    """An invitation to a team, mailed as a signed link (starverse.accounts.teams); accepted
    once, by a signed-in person with the invited address, before it expires or is revoked."""

    id = PublicIdField(prefix="inv")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField(max_length=254)
    role = models.CharField(max_length=16, choices=Role.choices)
    invited_by = models.ForeignKey("User", on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        "User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.email} to {self.tenant_id}"


class Budget(models.Model):
    """A monthly spending limit in a team: of one member (`user`), or of the whole team
    (`user` empty). Spent is what the team's ledger charged this calendar month for the
    member's instances (instances.budgets)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="budgets")
    user = models.ForeignKey(
        "User", null=True, blank=True, on_delete=models.CASCADE, related_name="budgets"
    )
    monthly_fen = models.BigIntegerField()
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "user"],
                condition=models.Q(user__isnull=False),
                name="budget_unique_member",
            ),
            models.UniqueConstraint(
                fields=["tenant"], condition=models.Q(user__isnull=True), name="budget_unique_team"
            ),
            models.CheckConstraint(
                condition=models.Q(monthly_fen__gte=0), name="budget_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.monthly_fen} of {self.user_id or 'team'} in {self.tenant_id}"


class AuditEvent(models.Model):
    """One thing a person did in a team (or their own account): ordered, stopped, topped up,
    invited, changed a role, created a token … Append-only; owners and admins read it."""

    id = PublicIdField(prefix="aud")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="audit_events")
    actor = models.ForeignKey(
        "User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    action = models.CharField(max_length=64)
    object_type = models.CharField(max_length=32, blank=True)
    object_id = models.CharField(max_length=64, blank=True)
    data = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField(default=timezone.now)
    ip = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["tenant", "-at"], name="audit_tenant_at")]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor_id}"


class ApiToken(models.Model):
    """An API credential. Only the SHA-256 of the token is kept; the token is shown once."""

    id = PublicIdField(prefix="tok")
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_tokens")
    team = models.ForeignKey(
        Tenant,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        help_text="The team it acts for; empty: the person's own account.",
    )
    scopes = models.JSONField(default=all_scopes, help_text="Of read, instances, billing, admin.")
    name = models.CharField(max_length=100)
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=16, help_text="First characters, to recognise it.")
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Spending caps (compute.token_caps says what a token's spend is) and an expiry: a script's
    # or an agent's token that cannot spend past what its owner allowed, nor live past a date.
    max_spend_fen = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="The most its orders may spend in all; empty: no cap."
    )
    max_spend_per_day_fen = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="The most its orders may spend in a day; empty: no cap."
    )
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Refused from this moment on; empty: never."
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def capped(self) -> bool:
        """Whether its spending has a cap (a tool that spends unattended asks for one)."""
        return self.max_spend_fen is not None or self.max_spend_per_day_fen is not None


class SshKey(models.Model):
    """An OpenSSH public key that instances of the user's tenant will accept."""

    id = PublicIdField(prefix="key")
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="ssh_keys")
    name = models.CharField(max_length=100)
    key_type = models.CharField(max_length=64)
    public_key = models.TextField()
    fingerprint = models.CharField(max_length=64)
    bits = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["user", "fingerprint"], name="sshkey_unique_per_user")
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.fingerprint}"


class TotpDevice(models.Model):
    """A user's authenticator app: the shared secret of RFC 6238 time-based codes (6 digits,
    30-second steps). It counts as the second factor only once confirmed with a code it made;
    until then it is an enrolment in progress and its secret may be shown again, afterwards
    never. `last_used_step` is the step of the last code accepted: a code of that step or an
    earlier one is refused, so each code logs in once."""

    user = models.OneToOneField(
        User, on_delete=models.CASCADE, primary_key=True, related_name="totp_device"
    )
    secret = models.CharField(max_length=64, help_text="Base32; never shown after enrolment.")
    created_at = models.DateTimeField(default=timezone.now)
    confirmed_at = models.DateTimeField(null=True, blank=True)
    last_used_step = models.BigIntegerField(null=True, blank=True)

    def __str__(self) -> str:
        return f"TOTP of {self.user_id}"


class RecoveryCode(models.Model):
    """A one-time code that stands in for the authenticator app when it is lost. Like an API
    token only its SHA-256 is kept; `used_at` is set when it is used, after which it is never
    accepted again. A new set replaces the old one whole."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="recovery_codes")
    code_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "code_hash"], name="recoverycode_unique")
        ]

    def __str__(self) -> str:
        return f"recovery code of {self.user_id}"


# Bounds of the idle auto-stop (instances.autostop), for a user's defaults and an instance's own
# values alike: (lowest, highest).
IDLE_UTIL_PCT_RANGE = (1, 100)
IDLE_MINUTES_RANGE = (10, 1440)
IDLE_WARN_MINUTES_RANGE = (1, 60)


class UserSettings(models.Model):
    """A user's defaults for what they order. The idle auto-stop's are chosen so that a
    forgotten instance costs at most about forty minutes after it went idle: warned at twenty,
    stopped at thirty (5 % utilisation counts as idle: a driver, a monitor or an idle Jupyter
    kernel keep a GPU above 0 %). No row: these defaults."""

    user = models.OneToOneField(
        User, on_delete=models.CASCADE, primary_key=True, related_name="settings"
    )
    idle_stop_enabled = models.BooleanField(
        default=True, help_text="New orders stop themselves when idle, unless they say otherwise."
    )
    idle_stop_util_pct = models.PositiveSmallIntegerField(default=5)
    idle_stop_minutes = models.PositiveSmallIntegerField(default=30)
    idle_warn_minutes = models.PositiveSmallIntegerField(default=10)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "user settings"
        verbose_name_plural = "user settings"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(idle_stop_util_pct__gte=1, idle_stop_util_pct__lte=100),
                name="usersettings_idle_util",
            ),
            models.CheckConstraint(
                condition=models.Q(idle_stop_minutes__gte=10, idle_stop_minutes__lte=1440),
                name="usersettings_idle_minutes",
            ),
            models.CheckConstraint(
                condition=models.Q(idle_warn_minutes__gte=1, idle_warn_minutes__lte=60),
                name="usersettings_idle_warn",
            ),
        ]

    def __str__(self) -> str:
        return f"settings of {self.user_id}"
