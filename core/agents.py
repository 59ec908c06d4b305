"""What happens to a connected agent that several apps care about, as signals: the app that
does it sends, the apps that hold something of the agent receive (they are siblings on one
layer and cannot import each other)."""

from __future__ import annotations

from django.dispatch import Signal

# The user disconnected an agent (oauth): sender=None, user, application_id. A receiver may
# return the path of a page where the user finishes what the disconnection started (a
# revocation to sign); the sender sends the user to the first one.
agent_disconnected = Signal()

# The user's Connected agents page is shown (oauth): sender=None, user. A receiver returns
# {application id: [what that agent may move with no prompt, one dict per grant]}: the page
# must not say nothing moves without a passkey when something does.
agents_listed = Signal()

# A user was set inactive (core.users), sent once that commits: sender=None, user, actor
# (core.lifecycle.Actor), why. Each app ends what it holds of the user's agents: their tokens,
# their spending keys. Nothing is sent on reactivation: what ended stays ended.
user_deactivated = Signal()
