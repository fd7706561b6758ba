"""Each task runs once, though the broker may deliver its message twice.

Tasks are acknowledged late: a message goes back to the queue unless the worker acknowledges it
after the task returned. On Redis that is at-least-once delivery, and the second delivery is not
only a crash's: a worker's warm shutdown (every rollout) can end with a task that finished in a
pool process but whose acknowledgement the stopping worker never sent, so kombu restores the
message at shutdown and the next worker runs the task again (seen in the rolling-restart test:
2 of 60 tasks ran twice). A worker killed between a task's end and its acknowledgement does the
same an hour later, when the visibility timeout restores the message.

So a pool process records, in the broker's Redis, each task message it finished (id and retry
count, kept twice the visibility timeout), and a worker handed a *redelivered* message whose task
has that record acknowledges it and drops it, the way it drops a revoked task. A message that was
never redelivered costs no read. A task that did not finish (a cold shutdown, a crash mid-run)
has no record and runs again, as at-least-once promises. Without Redis (the file-system broker
of `make run`, the in-memory one of the tests) nothing is recorded and nothing is dropped.
"""

import logging
from typing import Any

import redis
from celery import Task as BaseTask
from celery.worker.request import Request as BaseRequest
from celery.worker.state import task_ready
from kombu.transport import redis as kombu_redis

logger = logging.getLogger(__name__)

KEY = "starverse:task-ran:{id}:{retries}"


def _redis_channel(channel: Any) -> kombu_redis.Channel | None:
    return channel if isinstance(channel, kombu_redis.Channel) else None


def _key(task_id: str, retries: int | None) -> str:
    return KEY.format(id=task_id, retries=retries or 0)


class Request(BaseRequest):
    """A worker's request that drops a redelivered message of a task that already ran."""

    def revoked(self) -> bool:
        if super().revoked():
            return True
        if not self.delivery_info.get("redelivered"):
            return False
        channel = _redis_channel(self.message.channel)
        if channel is None:
            return False
        key = _key(self.id, self.request_dict.get("retries"))
        try:
            with channel.conn_or_acquire() as client:
                ran = bool(client.exists(key))
        except redis.RedisError:
            return False  # the broker will not say: run it (at least once)
        if not ran:
            return False
        logger.warning(
            "task.redelivered_after_it_ran task=%s id=%s: acknowledged and not run again",
            self.name,
            self.id,
        )
        task_ready(self)
        self.acknowledge()
        self._already_revoked = True
        return True


class Task(BaseTask):  # type: ignore[type-arg]
    """The platform's task base: records that a message's task ran (see the module's docstring)."""

    Request = "starverse.core.delivery:Request"

    def after_return(self, status: str, *args: Any, **kwargs: Any) -> None:
        super().after_return(status, *args, **kwargs)  # SUCCESS or FAILURE: both acknowledged
        self._record_ran()

    def on_retry(self, *args: Any, **kwargs: Any) -> None:
        super().on_retry(*args, **kwargs)  # the retry is a new message; this one is done
        self._record_ran()

    def _record_ran(self) -> None:
        request = self.request
        if request.is_eager or request.called_directly or not self.acks_late or not request.id:
            return
        try:
            with self.app.producer_pool.acquire(block=True) as producer:
                channel = _redis_channel(producer.channel)
                if channel is None:
                    return
                with channel.conn_or_acquire() as client:
                    client.set(
                        _key(request.id, request.retries), 1, ex=2 * channel.visibility_timeout
                    )
        except Exception:  # at worst the task may run twice, as before this module
            logger.warning("task.ran_not_recorded task=%s id=%s", self.name, request.id)
