"""Settings of the status-tool bench server: the project's, plus the bare baseline view."""

from picnic.settings import *  # noqa: F403

ROOT_URLCONF = "bench.status_urls"
