"""oauth's public face: all that the layers above it (mcp_adapter, console) use of the app.
The rest of the app is private to it by convention (core/tests/test_public_faces.py holds
the layers above to this module)."""

from __future__ import annotations

from oauth.policy import resource_served
from oauth.services import agent_use_record

__all__ = ["agent_use_record", "resource_served"]
