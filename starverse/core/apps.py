from celery import signals
from django.apps import AppConfig
from django.core.signals import request_finished

from starverse.core import logs, metrics, modelwords


class CoreConfig(AppConfig):
    name = "starverse.core"
    label = "core"

    def ready(self) -> None:
        """Every process that sends or runs tasks loads the apps: there the request id is put
        on each task and set again around its run (starverse.core.logs), retries and failures
        are counted, and a worker with METRICS_PORT serves its metrics (starverse.core.metrics).
        The models' names (apps, models, fields) become translations (starverse.core.modelwords)."""
        modelwords.translate()
        request_finished.connect(logs.on_request_finished, weak=False)
        signals.before_task_publish.connect(logs.on_before_task_publish, weak=False)
        signals.task_prerun.connect(logs.on_task_prerun, weak=False)
        signals.task_postrun.connect(logs.on_task_postrun, weak=False)
        signals.task_retry.connect(metrics.on_task_retry, weak=False)
        signals.task_failure.connect(metrics.on_task_failure, weak=False)
        signals.worker_ready.connect(metrics.on_worker_ready, weak=False)
