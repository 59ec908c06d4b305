"""One direction: every import statement of production code (module-level and inside
functions) follows the layer table in core/layers.py, and no two modules import each other,
directly or round a longer loop; and imports sit at the top of their module, but for the few
app loading needs (FUNCTION_LEVEL_IMPORTS). An ast walk, so an import a test never runs is
read too.

Production code is every module of the packages in the table but the dev-only ones (chain/,
dev/: scanned too, for their order) except tests/, migrations/ and
conftest.py; bench/ is outside the table."""

from __future__ import annotations

import ast
from pathlib import Path

from core.layers import (
    DEV_ONLY_PACKAGES,
    DOMAINS,
    LAYERS,
    PACKAGES,
    PUBLIC_FACE,
    import_allowed,
)

ROOT = Path(__file__).resolve().parents[2]
SKIPPED_PARTS = {"tests", "migrations", "node_modules", "build"}

# Known violations not fixed yet, each with its reason. It only shrinks: a pair that no longer
# occurs fails the test too, so a fixed one is taken off the list.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}
ALLOWED_CYCLES: dict[tuple[str, ...], str] = {}

# The rooms of the actions app (docs/architecture.md, The wallet in rooms): one package per
# domain, and the few modules every room shares at the app level. A new module goes in a room,
# or on this list with a reason to be app-wide.
ACTION_ROOMS = (
    "execution",
    "accounts",
    "tool_requests",
    "permissions",
    "proposals",
    "bridges",
    "card",
    "ramps",
    "history",
    "signing_page",
)
# What a room offers the rest of the app and the layers above: its public face and its tables.
ROOM_FACES = ("public", "models")
ACTION_APP_WIDE = {
    "actions",
    "actions.action_types",
    "actions.admin",
    "actions.apps",
    "actions.chain_reads",
    "actions.contract",
    "actions.errors",
    "actions.evm_clients",
    "actions.health",
    "actions.models",
    "actions.pages",
    "actions.presenters",
    "actions.providers",
    "actions.public",
    "actions.schema_parts",
    "actions.serializers",
    "actions.tasks",
    "actions.tool_reads",
    "actions.urls",
    "actions.views",
}
MAX_MODULE_LINES = 600


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def production_modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if SKIPPED_PARTS & set(rel.parts) or path.name == "conftest.py":
                continue
            found[_module_name(path)] = path
    return found


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports_of(module: str, path: Path, known: set[str]) -> list[tuple[int, str]]:
    """(line, imported module) for each import statement of a first-party module, relative
    ones resolved; `from package import name` counts as `package.name` when that is a module.
    Imports under `if TYPE_CHECKING:` are left out (they never run)."""
    tree = ast.parse(path.read_text(), str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module
            names = [
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
                for alias in node.names
            ]
        else:
            continue
        if _type_checking_only(node, parents):
            continue
        found += [(node.lineno, name) for name in names if name.split(".")[0] in PACKAGES]
    return found


def import_graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], int]]:
    modules = production_modules()
    known = set(modules)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    lines: dict[tuple[str, str], int] = {}
    for name, path in modules.items():
        for line, imported in imports_of(name, path, known):
            # `import a.b.c` runs a, a.b and a.b.c: the edge goes to the deepest known module.
            while imported not in known and "." in imported:
                imported = imported.rpartition(".")[0]
            if imported in known and imported != name:
                graph[name].add(imported)
                lines.setdefault((name, imported), line)
    return graph, lines


def upward_imports() -> dict[tuple[str, str], int]:
    graph, lines = import_graph()
    return {
        (importer, imported): lines[importer, imported]
        for importer, targets in graph.items()
        for imported in targets
        if not import_allowed(importer, imported)
    }


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """Each strongly connected component of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(tuple(sorted(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


# Function-level imports: only where app loading (or a process hook) needs them. Keyed by
# (module, imported); the value is the reason.
FUNCTION_LEVEL_IMPORTS: dict[tuple[str, str], str] = {
    ("core.apps", "core"): "ready(): core.lifecycle defines models, possible once apps are loaded",
    ("actions.apps", "actions"): "ready(): actions.health imports the models",
    (
        "actions.apps",
        "actions.accounts.public",
    ): "ready(): preferences (the login receiver) imports models",
    ("actions.apps", "actions.action_types"): "ready(): the kinds of every room import models",
    ("actions.apps", "actions.execution.public"): "ready(): signing (a receiver) imports models",
    (
        "actions.apps",
        "actions.permissions.public",
    ): "ready(): the permissions' receivers import models",
    ("operations.apps", "operations.metrics"): "ready(): it imports the models",
    ("picnic.apps", "picnic"): "ready(): picnic.otel instruments Django, once it is set up",
    ("oauth.apps", "oauth"): "ready(): oauth.cimd imports oauth.services, which imports models",
    (
        "mcp_adapter.contract_recorder",
        "mcp_adapter.server",
    ): "a pytest plugin, loaded before Django",
    ("mcp_adapter.contract_recorder", "rest_framework.views"): "the same",
    (
        "picnic.celery",
        "core.metrics",
    ): "every process imports picnic.celery before Django is set up",
    ("picnic.gunicorn_conf", "core.metrics"): "the gunicorn master reads this before Django",
    ("picnic.celery", "core.gc_freeze"): "the same: it imports django.urls",
    ("picnic.gunicorn_conf", "core.gc_freeze"): "the same",
    ("core.metrics", "core"): "core.health imports DRF: a process that only counts needs neither",
}


def function_level_imports() -> set[tuple[str, str]]:
    found = set()
    for name, path in production_modules().items():
        tree = ast.parse(path.read_text(), str(path))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    found |= {(name, alias.name) for alias in node.names}
                elif isinstance(node, ast.ImportFrom):
                    found.add((name, node.module or "."))
    return found


# --- The checks ---------------------------------------------------------------------------------


def test_the_table_names_every_package_once_and_every_package_is_in_it():
    names = [package for layer in LAYERS for package in layer]
    assert len(names) == len(set(names))
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert packages == set(names)


def test_every_domain_has_its_public_face():
    for app in DOMAINS:
        assert (ROOT / app / f"{PUBLIC_FACE}.py").is_file(), f"{app}/{PUBLIC_FACE}.py is missing"


def test_the_rule():
    assert import_allowed("actions.services", "core.lifecycle")
    assert import_allowed("mcp_adapter.server", "oauth.public")
    assert import_allowed("console.selectors", "actions.public")
    assert not import_allowed("mcp_adapter.task_store", "actions.views")  # past the face
    assert not import_allowed("console.moves", "operations.decisions")  # past the face
    assert not import_allowed("console.moves", "messaging")  # the package: its __init__
    assert import_allowed("core.events", "evm.userops")
    assert not import_allowed("core.health", "actions.chain_reads")  # upward
    assert not import_allowed("actions.views", "messaging.models")  # a sibling
    assert not import_allowed("actions.services.proposals", "chain.safe")  # the dev stack
    assert import_allowed("dev.management.commands.run_local", "chain.stack")
    assert import_allowed("dev.demo.actions", "actions.models")  # dev is above everything
    assert import_allowed("dev.providers.local_lifi", "chain.dev")
    assert import_allowed("chain.stack", "evm.bundler")
    assert not import_allowed("chain.stack", "dev.local_server")  # chain is below dev
    assert not import_allowed("picnic.settings", "dev.apps")  # production never imports dev
    assert not import_allowed("core.health", "dev.testing")
    assert not import_allowed("actions.providers.lifi", "dev.providers.local_lifi")


def test_the_scan_reads_function_level_and_relative_imports(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import sibling\n"
        "from .sibling import thing\n"
        "if TYPE_CHECKING:\n"
        "    from actions.models import Action\n"
        "def f():\n"
        "    from messaging import services\n"
        "    import core.events\n"
    )
    (package / "mod.py").write_text(source)
    known = {"pkg.sibling", "messaging.services"}
    # pkg is not a package of the table: only the two imports of table packages are kept.
    assert imports_of("pkg.mod", package / "mod.py", known) == [
        (7, "messaging.services"),
        (8, "core.events"),
    ]


def test_the_cycle_finder_finds_a_loop_of_three_and_nothing_else():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert cycles(graph) == [("a", "b", "c")]


def test_no_production_module_imports_upward_or_sideways_or_the_dev_stack():
    found = upward_imports()
    new = {
        f"{a}:{line} imports {b}" for (a, b), line in found.items() if (a, b) not in ALLOWED_UPWARD
    }
    assert sorted(new) == []
    # The allow-list only shrinks: a fixed import comes off it.
    assert sorted(set(ALLOWED_UPWARD) - set(found)) == []


def test_no_production_module_imports_the_dev_packages():
    """Said on its own (it is part of the rule above too): production code, every module of
    the packages that are not dev-only, imports neither dev/ nor chain/, by any path."""
    graph, lines = import_graph()
    found = sorted(
        f"{importer}:{lines[importer, imported]} imports {imported}"
        for importer, targets in graph.items()
        if importer.split(".")[0] not in DEV_ONLY_PACKAGES
        for imported in targets
        if imported.split(".")[0] in DEV_ONLY_PACKAGES
    )
    assert found == []
    # dev/ is a package of the scan: a test that finds nothing must have looked.
    assert any(name.startswith("dev.") for name in graph)


def test_no_module_cycle():
    graph, _ = import_graph()
    found = cycles(graph)
    assert [c for c in found if c not in ALLOWED_CYCLES] == []
    assert sorted(set(ALLOWED_CYCLES) - set(found)) == []


def test_function_level_imports_are_the_few_app_loading_needs():
    found = function_level_imports()
    assert sorted(found - set(FUNCTION_LEVEL_IMPORTS)) == []
    assert sorted(set(FUNCTION_LEVEL_IMPORTS) - found) == []
    assert len(FUNCTION_LEVEL_IMPORTS) < 20


def test_every_module_of_the_actions_app_is_in_a_room_or_app_wide():
    rooms = {f"actions.{room}" for room in ACTION_ROOMS}
    modules = [name for name in production_modules() if name.split(".")[0] == "actions"]
    assert all((ROOT / "actions" / room / "__init__.py").is_file() for room in ACTION_ROOMS)
    strays = [
        name
        for name in modules
        if ".".join(name.split(".")[:2]) not in rooms
        and name not in ACTION_APP_WIDE
        and not name.startswith("actions.providers.")
    ]
    assert strays == []
    # Each room is read from its docstring: it names every module it holds.
    for room in ACTION_ROOMS:
        doc = ast.get_docstring(ast.parse((ROOT / "actions" / room / "__init__.py").read_text()))
        assert doc, f"actions/{room}/__init__.py says nothing"
        for path in (ROOT / "actions" / room).glob("*.py"):
            assert path.name == "__init__.py" or path.name in doc, f"{room}: {path.name}"


def _room_of(module: str) -> str | None:
    parts = module.split(".")
    return (
        parts[1] if parts[0] == "actions" and len(parts) > 2 and parts[1] in ACTION_ROOMS else None
    )


def room_face_violations() -> list[str]:
    """Imports of a room's insides from elsewhere in the app (another room, the app level), and
    imports of a room's own face from inside it (the face is for others; used from inside, it
    would loop). The layers above see only `actions.public` (the layer rule); the dev app and
    the deployment's config may reach further, as they may into any app."""
    graph, lines = import_graph()
    found = []
    for importer, targets in graph.items():
        if importer.split(".")[0] != "actions":
            continue
        for imported in targets:
            room = _room_of(imported)
            if room is None:
                continue
            face = imported.split(".")[2] in ROOM_FACES
            if _room_of(importer) != room and not face:
                found.append(f"{importer}:{lines[importer, imported]} imports {imported}")
            elif _room_of(importer) == room and imported == f"actions.{room}.public":
                found.append(f"{importer}:{lines[importer, imported]} imports its own face")
    return sorted(found)


def test_a_room_is_used_from_outside_only_through_its_public_face_and_its_models():
    """Each room of the wallet has a public face, `actions/<room>/public.py`; the other rooms,
    the app level and the layers above use a room only through it and its models.py."""
    assert all((ROOT / "actions" / room / "public.py").is_file() for room in ACTION_ROOMS)
    assert room_face_violations() == []


def test_the_room_rule_finds_an_import_of_a_rooms_insides():
    """The rule above can fail: the graph it reads does hold cross-room edges, all of them to
    a face, and the check names an edge to a room's insides."""
    graph, _ = import_graph()
    crossing = {
        (a, b)
        for a, targets in graph.items()
        for b in targets
        if a.split(".")[0] == "actions" and _room_of(b) and _room_of(a) != _room_of(b)
    }
    assert len(crossing) > 50
    assert {b.split(".")[2] for _, b in crossing} == set(ROOM_FACES)
    assert _room_of("actions.card.limit") == "card" and _room_of("actions.views") is None


def test_each_room_keeps_its_models_in_its_own_module():
    """The models of the app live in the rooms; actions/models.py only imports them."""
    registry = ast.parse((ROOT / "actions" / "models.py").read_text())
    assert not [n for n in registry.body if isinstance(n, ast.ClassDef)]
    imported = {
        node.module for node in registry.body if isinstance(node, ast.ImportFrom) and node.module
    }
    with_models = {
        room for room in ACTION_ROOMS if (ROOT / "actions" / room / "models.py").exists()
    }
    assert imported == {f"actions.{room}" for room in with_models}


def test_no_production_module_is_over_600_lines():
    """In any app, not only the wallet; the settings are one flat list of the environment's
    variables and stay whole. The dev-only packages are not production."""
    long = {
        name: lines
        for name, path in production_modules().items()
        if name.split(".")[0] not in DEV_ONLY_PACKAGES
        and name != "picnic.settings"
        and (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_module_is_called_lifecycle_but_the_cores():
    found = [name for name in production_modules() if name.rpartition(".")[2] == "lifecycle"]
    assert found == ["core.lifecycle"]
