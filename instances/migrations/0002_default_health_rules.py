from django.db import migrations

RULES = [
    ("heartbeat-60s", "heartbeat", {"timeout_s": 60}, "down"),
    ("critical-xid", "xid", {"xids": [48, 63, 64, 74, 79, 94, 95]}, "cordoned"),
    ("uncorrectable-ecc", "ecc_uncorrectable", {"min_count": 1}, "cordoned"),
    ("gpu-lost", "gpu_lost", {}, "cordoned"),
]


def seed(apps, schema_editor):
    HealthRule = apps.get_model("instances", "HealthRule")
    for name, kind, params, action in RULES:
        HealthRule.objects.get_or_create(name=name, defaults={"kind": kind, "params": params,
                                                              "action": action})


class Migration(migrations.Migration):
    dependencies = [("instances", "0001_fleet")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
