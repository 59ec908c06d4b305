"""`manage.py mint_agent_token`: a bearer token for an agent on any deployment (the cluster,
production), as `make run` prints one for the demo. Prints the token alone on stdout."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from oauth.services import MintRefused, agent_token_mint


class Command(BaseCommand):
    help = (
        "Mint an access token for USER through the registered OAuth client CLIENT_ID, bound to "
        "the MCP server (and the API). Prints the token on stdout, what it is on stderr."
    )

    def add_arguments(self, parser):
        parser.add_argument("--user", required=True, help="the user the agent acts for")
        parser.add_argument("--client", required=True, help="a registered client_id")
        parser.add_argument(
            "--scope",
            default="",
            help="space-separated scopes (default: every scope the server knows)",
        )
        parser.add_argument("--days", type=int, default=30, help="lifetime, 1 to 90 days")
        parser.add_argument(
            "--resource",
            action="append",
            default=None,
            help="the audience (RFC 8707); default MCP_RESOURCE_URL; repeat for several",
        )

    def handle(self, *args, user, client, scope, days, resource, **options):
        scopes = scope.split() or list(settings.OAUTH2_PROVIDER["SCOPES"])
        try:
            token = agent_token_mint(
                username=user,
                client_id=client,
                scopes=scopes,
                days=days,
                resource=resource or [settings.MCP_RESOURCE_URL],
            )
        except MintRefused as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(token.token)
        self.stderr.write(
            f"for {user} through {client}, scopes {token.scope}, audience "
            f"{' '.join(token.resource)}, expires {token.expires:%Y-%m-%d %H:%M} UTC"
        )
