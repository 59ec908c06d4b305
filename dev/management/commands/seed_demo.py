"""Idempotent demo data for `make run`: users, an OAuth client with a token, demo actions."""

from __future__ import annotations

import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from oauth2_provider.models import AccessToken, Application

from actions.evm_clients import ChainUnavailable
from dev.demo.actions import local_chains, seed_actions, seed_ramps
from dev.demo.messaging import seed_messaging
from dev.demo.operations import seed_operations

STAFF = ("staff", "picnic-staff-demo")
END_USER = ("alice", "alice-demo-password")
CLIENT_ID = "picnic-demo-agent"
SCOPES = (
    "read:actions write:actions agent:dm_read agent:dm_write operations:read operations:write "
    "read:balances read:accounts read:card read:transactions read:profile"
)


class Command(BaseCommand):
    help = "Create demo data (idempotent). Refuses to run with DJANGO_DEBUG=false."

    def add_arguments(self, parser):
        parser.add_argument("--skip-chain", action="store_true", help="no on-chain demo actions")

    def handle(self, *args, skip_chain: bool = False, **options):
        if not settings.DEBUG:
            raise CommandError("seed_demo creates known passwords: it refuses DJANGO_DEBUG=false")
        User = get_user_model()
        staff, created = User.objects.get_or_create(
            username=STAFF[0],
            defaults={"is_staff": True, "is_superuser": True, "email": "staff@example.test"},
        )
        if created:
            staff.set_password(STAFF[1])
            staff.save()
        alice, created = User.objects.get_or_create(
            username=END_USER[0], defaults={"email": "alice@example.test"}
        )
        if created:
            alice.set_password(END_USER[1])
            alice.save()
        app, _ = Application.objects.get_or_create(
            client_id=CLIENT_ID,
            defaults={
                "name": "Demo MCP agent",
                "client_type": Application.CLIENT_CONFIDENTIAL,
                "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE,
                "redirect_uris": "http://127.0.0.1:8000/o/callback/",
                "algorithm": "",
            },
        )
        # Bound (RFC 8707) to the MCP server, which accepts only tokens issued for it; the API
        # accepts it too, as it serves that resource (oauth.policy).
        audience = [settings.MCP_RESOURCE_URL]
        token = _demo_tokens().first()
        if token is None:
            token = AccessToken.objects.create(
                user=alice,
                application=app,
                scope=SCOPES,
                token=secrets.token_urlsafe(32),
                expires=timezone.now() + timedelta(days=30),
                resource=audience,
            )
        say = self.stdout.write
        seed_messaging(user=alice, application=app, say=say)
        seed_operations(user=alice, application=app, say=say)
        seed_ramps(user=alice)
        if not skip_chain:
            try:
                seed_actions(user=alice, application=app, say=say)
            except (OSError, ConnectionError) as exc:
                where = "; ".join(
                    f"{c.name} at {c.rpc_url} / {c.bundler_url}" for c in local_chains()
                )
                raise CommandError(
                    f"the local chain stack is not reachable ({where}): {exc}; start it "
                    "(python -m chain.stack) or pass --skip-chain"
                ) from exc
            except ChainUnavailable as exc:
                raise CommandError(
                    f"the local chain {exc.chain.name} is not reachable ({exc.cause}); start "
                    "the stack (python -m chain.stack) or pass --skip-chain"
                ) from exc
        say(self.style.SUCCESS("demo data ready"))
        for line in demo_logins(token.token):
            say(f"  {line}")
        say(f"  scopes        {token.scope}")


def _demo_tokens():
    """Alice's valid demo tokens bound to the MCP server, newest first."""
    return AccessToken.objects.filter(
        user__username=END_USER[0],
        application__client_id=CLIENT_ID,
        scope=SCOPES,
        resource=[settings.MCP_RESOURCE_URL],
        expires__gt=timezone.now(),
    ).order_by("-expires")


def demo_token() -> str | None:
    """The bearer token `seed_demo` made or kept (None before it ran)."""
    token = _demo_tokens().first()
    return token.token if token else None


def demo_logins(token: str, *, web: str = "127.0.0.1:8000") -> list[str]:
    """The demo logins, one line each: what `seed_demo` and `make run` print last.

    Staff use 127.0.0.1; end users use localhost, because WebAuthn refuses an IP address as
    the passkeys' relying-party id (WEBAUTHN_RP_ID)."""
    port = web.rpartition(":")[2]
    return [
        f"staff login   http://127.0.0.1:{port}/admin/ and /staff/  "
        f"user {STAFF[0]} password {STAFF[1]}",
        f"end user      http://localhost:{port}/passkeys/  "
        f"user {END_USER[0]} password {END_USER[1]}",
        f"bearer token  {token}  ({END_USER[0]}'s agent, every scope: "
        f"the MCP server {settings.MCP_RESOURCE_URL} and the API)",
    ]
