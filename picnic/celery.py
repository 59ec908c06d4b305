import os

import celery
from celery import Celery
from celery.signals import worker_init, worker_process_init, worker_process_shutdown
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "picnic.settings")


class Task(celery.Task):
    """Every task's publish (`.delay()`, `apply_async`, the beat's ticks) waits at most
    BROKER_TIMEOUT_SECONDS for the socket write and, on RabbitMQ, for the publisher confirm:
    without a timeout a broker that stops answering holds the publisher forever. Redis
    commands and every connect are bounded by the settings (picnic/brokers.py)."""

    def apply_async(self, args=None, kwargs=None, **options):
        timeout = settings.BROKER_TIMEOUT_SECONDS
        options.setdefault("timeout", timeout)
        options.setdefault("confirm_timeout", timeout)
        return super().apply_async(args, kwargs, **options)


app = Celery("picnic", task_cls=Task)
# The app of every thread, not only of this one: core code reaches it as celery.current_app
# (the readiness checks run in a thread pool, where the thread-local current app is unset).
app.set_default()
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_shutdown.connect
def _metrics_process_dead(pid=None, **kwargs):
    # A pool process exits: prometheus-client drops its live-gauge files (multiprocess mode).
    # Late: every process imports this module (picnic/__init__) before Django is set up.
    from core.metrics import mark_process_dead

    mark_process_dead(pid or os.getpid())


@worker_init.connect
def _declare_amqp_queues(sender=None, **kwargs):
    # On RabbitMQ every queue of the deployment and the dead-letter queue (picnic/brokers.py)
    # exist before the worker consumes: native delayed delivery binds them all, and the broker
    # keeps a dead-lettered message only in a queue that exists. Declaring is idempotent.
    dead = settings.BROKER_DEAD_LETTER_QUEUE
    if dead is None:
        return
    with app.connection_for_write() as conn:
        for queue in (*app.conf.task_queues, dead):
            queue.bind(conn.default_channel).declare()


@worker_init.connect
def _freeze_after_start_up(sender=None, **kwargs):
    # Django set up and the task modules imported: the main process freezes its start-up
    # objects (core/gc_freeze.py), before a prefork pool forks (its children inherit the frozen
    # generation); with the solo or threads pool this process runs the tasks itself.
    from core.gc_freeze import freeze_after_start_up

    freeze_after_start_up("celery worker")


@worker_process_init.connect
def _freeze_in_pool_process(**kwargs):
    # A prefork pool process, after its own start-up: what it allocated since the fork, too.
    from core.gc_freeze import freeze_after_start_up

    freeze_after_start_up(f"celery pool process {os.getpid()}")
