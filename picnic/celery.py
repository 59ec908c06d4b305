import os

from celery import Celery
from celery.signals import worker_process_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "picnic.settings")

app = Celery("picnic")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_shutdown.connect
def _metrics_process_dead(pid=None, **kwargs):
    # A pool process exits: prometheus-client drops its live-gauge files (multiprocess mode).
    from core.metrics import mark_process_dead

    mark_process_dead(pid or os.getpid())
