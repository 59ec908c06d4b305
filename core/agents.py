"""What happens to a connected agent that several apps care about, as signals: the app that
does it sends, the apps that hold something of the agent receive (they are siblings on one
layer and cannot import each other)."""

from __future__ import annotations

from django.dispatch import Signal

# The user disconnected an agent (oauth): sender=None, user, application_id. A receiver may
# return the path of a page where the user finishes what the disconnection started (a
# revocation to sign); the sender sends the user to the first one.
agent_disconnected = Signal()
