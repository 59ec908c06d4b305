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
    # This deployment: settings, URLs, the process entry points.
    ("picnic",),
    # Local runs: the run commands, the demo data, the local providers, the test helpers.
    ("dev",),
)

# The dev-only packages: the local chain stack and the dev app. Production code never imports
# them, wherever they sit in the table; only they (and tests) do, each following the order.
DEV_ONLY_PACKAGES = ("chain", "dev")

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
    if target in DEV_ONLY_PACKAGES and top not in DEV_ONLY_PACKAGES:
        return False
    if top in FACE_USERS and target in DOMAINS and imported != f"{target}.{PUBLIC_FACE}":
        return False
    return PACKAGES[target] < PACKAGES[top]
