"""Celery tasks of the oauth app: thin, each one service call."""

from __future__ import annotations

from celery import shared_task

from oauth import services


@shared_task(name="oauth.tasks.client_logo_fetch")
def client_logo_fetch(profile_id: str) -> None:
    services.client_logo_fetch(profile_id=int(profile_id))
