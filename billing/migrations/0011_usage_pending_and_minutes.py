"""Usage posted by the hour: a wallet's pending money (the meter's accrued minutes, held against
its balance), and a posting's minutes. Arrears now exist only while no cash is free of pending
usage."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0005_user_settings'),
        ('billing', '0010_transfer_invoiceable_portion'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='wallet',
            name='wallet_arrears_only_without_cash',
        ),
        migrations.AddField(
            model_name='ledgertransaction',
            name='minutes',
            field=models.PositiveIntegerField(db_default=0, default=0, help_text='Usage: the minutes of GPU time this posting pays (an hourly posting of the meter, or the rest of a session at its stop). 0 for other kinds, and for per-minute postings made before hourly postings, each of which paid one minute.'),
        ),
        migrations.AddField(
            model_name='wallet',
            name='pending_cash_fen',
            field=models.BigIntegerField(db_default=0, default=0, help_text='Usage accrued from cash, not yet posted.'),
        ),
        migrations.AddField(
            model_name='wallet',
            name='pending_promo_fen',
            field=models.BigIntegerField(db_default=0, default=0, help_text='Usage accrued from trial credit, not yet posted.'),
        ),
        migrations.AddConstraint(
            model_name='wallet',
            constraint=models.CheckConstraint(condition=models.Q(('arrears_fen', 0), ('cash_fen', models.F('pending_cash_fen')), _connector='OR'), name='wallet_arrears_only_without_free_cash'),
        ),
        migrations.AddConstraint(
            model_name='wallet',
            constraint=models.CheckConstraint(condition=models.Q(('pending_cash_fen__gte', 0), ('pending_cash_fen__lte', models.F('cash_fen'))), name='wallet_pending_cash_within_cash'),
        ),
        migrations.AddConstraint(
            model_name='wallet',
            constraint=models.CheckConstraint(condition=models.Q(('pending_promo_fen__gte', 0), ('pending_promo_fen__lte', models.F('promo_fen'))), name='wallet_pending_promo_within_promo'),
        ),
    ]
