import os

from celery import Celery
from celery.signals import worker_process_init, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "starverse.settings.dev")

# every task acknowledged late runs once, however often Redis delivers it: see core.delivery
app = Celery("starverse", task_cls="starverse.core.delivery:Task")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_init.connect
@worker_ready.connect
def _freeze_startup_heap(**_kwargs: object) -> None:
    """Each worker process, once started (a prefork child, or the worker itself when it runs
    tasks in threads): see starverse.heap."""
    from starverse.heap import freeze_startup_heap

    freeze_startup_heap()
