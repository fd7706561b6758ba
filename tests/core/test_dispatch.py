"""The task seam finds every task by name, from any thread and from many at once: web servers
answer requests in threads Celery never saw, the first requests after a start arrive together,
and each must still start its tasks."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from starverse.core.dispatch import send

ROOT = Path(__file__).resolve().parents[2]
# A fresh process, so no tasks module is imported before the seam looks the task up.
FROM_A_THREAD = """
import threading, django
django.setup()
from django.conf import settings
settings.KUBECONFIG = None
from starverse.core.dispatch import send
errors = []
barrier = threading.Barrier(8)
def request_thread():
    barrier.wait()
    try:
        send("fleet.tasks.sync_nodes_from_cluster")
    except BaseException as error:
        errors.append(repr(error))
threads = [threading.Thread(target=request_thread) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join(30)
print("errors:", errors)
"""


def test_eight_threads_at_once_each_find_their_task_in_a_fresh_process():
    ran = subprocess.run(
        [sys.executable, "-c", FROM_A_THREAD],
        cwd=ROOT,
        env={"DJANGO_SETTINGS_MODULE": "starverse.settings.test", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "errors: []" in ran.stdout, ran.stdout + ran.stderr[-2000:]


def test_an_unknown_task_name_is_refused_loudly():
    with pytest.raises(LookupError, match=re.escape("no task named instances.tasks.nope")):
        send("instances.tasks.nope")
