"""Workers move their start-up heap out of the garbage collector's way (starverse.heap)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _frozen_after(code: str) -> int:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "starverse.settings.test"}
    answer = subprocess.run(
        [sys.executable, "-c", f"{code}; import gc; print(gc.get_freeze_count())"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return int(answer.stdout.strip().splitlines()[-1])


def test_the_wsgi_module_freezes_what_start_up_made():
    assert _frozen_after("import django") == 0  # nothing freezes on its own
    assert _frozen_after("import starverse.wsgi") > 50_000  # Django and every app, frozen


def test_a_celery_worker_process_freezes_its_heap_when_it_starts():
    code = (
        "import django; django.setup(); from starverse.celery import app; "
        "from celery.signals import worker_process_init; worker_process_init.send(sender=None)"
    )
    assert _frozen_after(code) > 50_000
