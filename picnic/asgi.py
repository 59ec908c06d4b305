"""The ASGI entry point: gunicorn serves it with uvicorn workers (picnic/gunicorn.conf.py), so
responses can stream (the live updates of the support console need that)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "picnic.settings")
application = get_asgi_application()
