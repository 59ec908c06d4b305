"""The import layers: one table, checked by core/tests/test_layers.py (every import statement of
production code, function-level ones included) and described in docs/architecture.md, Layers.

Bottom to top. A module may import its own package and the packages of the layers below it;
never a package above it, and never a sibling on its own layer (siblings meet only in the
layers above them, or through a registry of the core that they fill from AppConfig.ready()).
The console and the MCP server reach a domain app only through its public face
(`<app>/public.py`).
"""

from __future__ import annotations

LAYERS: tuple[tuple[str, ...], ...] = (
    # The EVM primitives: ERC-4337 user operations, the bundler client, signatures. No Django.
    ("evm",),
    # The local chain stack (Hardhat, EntryPoints, Alto, our contracts): the dev stack only.
    ("chain",),
    # The shared machinery every app uses and no app owns; apps register into it.
    ("core",),
    # The domains: each owns its models, services and API.
    ("oauth", "actions", "messaging", "operations"),
    # What uses the domains: the staff console and the MCP server.
    ("console", "mcp_adapter"),
    # This deployment: settings, URLs, the process entry points, the run commands.
    ("picnic",),
)

# chain/ is the local dev stack: production code never imports it, wherever it sits in the
# table. These modules run or seed the local system and may: the run commands (run_prod
# starts the local providers and chain stack in place of real ones), the demo data, and the
# local stand-ins of outside providers, which only the run commands and tests start.
DEV_ONLY_PACKAGES = ("chain",)
DEV_MODULES = (
    "picnic.management.commands.run_local",
    "picnic.management.commands.run_prod",
    "picnic.management.commands.seed_demo",
    "actions.demo",
    "actions.providers.local_lifi",
)

# One public face per domain: the layer right above the domains (the console, the MCP server)
# uses a domain app only through `<app>.public` (tool contracts, task hooks, search and
# stuck-work providers, the staff services), never its models, views, selectors or services.
DOMAINS = ("oauth", "actions", "messaging", "operations")
FACE_USERS = ("console", "mcp_adapter")
PUBLIC_FACE = "public"

PACKAGES: dict[str, int] = {
    package: level for level, packages in enumerate(LAYERS) for package in packages
}


def layer_of(module: str) -> int | None:
    """The layer of a dotted module name, or None for a module outside the table."""
    return PACKAGES.get(module.split(".")[0])


def import_allowed(importer: str, imported: str) -> bool:
    """Whether module `importer` may import module `imported` (both dotted names)."""
    top, target = importer.split(".")[0], imported.split(".")[0]
    if target not in PACKAGES or top == target:
        return True
    if target in DEV_ONLY_PACKAGES and importer not in DEV_MODULES:
        return top in DEV_ONLY_PACKAGES
    if top in FACE_USERS and target in DOMAINS and imported != f"{target}.{PUBLIC_FACE}":
        return False
    return PACKAGES[target] < PACKAGES[top]
