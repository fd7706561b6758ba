"""Every ledger transaction gets its place in its wallet's ledger (seq: 1, 2, 3 …, the order
it was posted in) and every wallet the count of its postings: statements, exports and lists
read the ledger in posting order, which created_at cannot give (postings of one moment, a
meter tick's hours, share it).

Transactions posted before are numbered in the order they were read until now (created_at,
then id); the ledger's rows are immutable, so its update trigger is lifted for the numbering
inside this migration's transaction and put back."""

from django.db import migrations, models

TABLE = "billing_ledgertransaction"

NUMBER = f"""
ALTER TABLE {TABLE} DISABLE TRIGGER {TABLE}_immutable;
UPDATE {TABLE} AS t SET seq = n.seq
FROM (
    SELECT id, row_number() OVER (PARTITION BY wallet_id ORDER BY created_at, id) AS seq
    FROM {TABLE}
) AS n
WHERE n.id = t.id;
ALTER TABLE {TABLE} ENABLE TRIGGER {TABLE}_immutable;
UPDATE billing_wallet AS w SET postings = c.postings
FROM (SELECT wallet_id, COUNT(*) AS postings FROM {TABLE} GROUP BY wallet_id) AS c
WHERE c.wallet_id = w.id;
"""

UNNUMBER = "UPDATE billing_wallet SET postings = 0;"


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0011_usage_pending_and_minutes"),
    ]

    operations = [
        migrations.AddField(
            model_name="wallet",
            name="postings",
            field=models.BigIntegerField(
                db_default=0,
                default=0,
                help_text="How many transactions its ledger has: the last one's number (seq).",
            ),
        ),
        migrations.AddField(
            model_name="ledgertransaction",
            name="seq",
            field=models.BigIntegerField(null=True),
        ),
        migrations.RunSQL(NUMBER, reverse_sql=UNNUMBER),
        migrations.AlterField(
            model_name="ledgertransaction",
            name="seq",
            field=models.BigIntegerField(),
        ),
        migrations.AddConstraint(
            model_name="ledgertransaction",
            constraint=models.UniqueConstraint(fields=("wallet", "seq"), name="ledger_wallet_seq"),
        ),
    ]
