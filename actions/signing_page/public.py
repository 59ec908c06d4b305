"""The signing page's face: its views, for the routes."""

from __future__ import annotations

from actions.signing_page import views

__all__ = [
    "views",
]
