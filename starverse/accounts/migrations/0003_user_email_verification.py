"""E-mail verification and the canonical address (the trial credit waits for the one and is
given once per the other).

Existing accounts are marked verified as of the day they joined: they received the trial under
the old rule (at sign-up, keyed `trial:{user}`), so there is nothing left to wait for, and asking
them to verify now would gain nothing. Their canonical address is computed as sign-up computes
it; an address that has no canonical form keeps its normalised self. The grants they received
keep their old keys, and billing.onboarding counts them when another account of the same
canonical address verifies (no second trial for an alias of an old account)."""

from django.db import migrations, models

from starverse.accounts.canonical import canonical_email


def backfill(apps, schema_editor):
    User = apps.get_model("accounts", "User")
    batch = []
    for user in User.objects.only("pk", "email", "date_joined").iterator(chunk_size=2000):
        try:
            user.canonical_email = canonical_email(user.email)
        except ValueError:
            user.canonical_email = user.email
        user.email_verified_at = user.date_joined
        batch.append(user)
        if len(batch) >= 2000:
            User.objects.bulk_update(batch, ["canonical_email", "email_verified_at"])
            batch = []
    if batch:
        User.objects.bulk_update(batch, ["canonical_email", "email_verified_at"])


class Migration(migrations.Migration):
    dependencies = [("accounts", "0002_two_factor")]

    operations = [
        migrations.AddField(
            model_name="user",
            name="canonical_email",
            field=models.CharField(
                db_index=True,
                default="",
                editable=False,
                help_text="The mailbox the address reaches (+tags, Gmail's dots and alias domains "
                "folded); the trial credit is given once per canonical address.",
                max_length=320,
            ),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="user",
            name="email_verified_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
