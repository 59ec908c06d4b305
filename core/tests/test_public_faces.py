"""One public face per app: the layers above the apps (console, mcp_adapter) use an app only
through its `public` module, never its views, presenters, selectors, services or models. Read
from the source (every import, at module level or inside a function), so it needs no database
and fails on the line that reaches past a face."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
APPS = ("actions", "messaging", "operations", "oauth")
ABOVE = ("console", "mcp_adapter")


def production_modules(package: str) -> list[Path]:
    """The package's Python files, tests and migrations left out (tests may build their data
    with any app's factories and models)."""
    return sorted(
        path
        for path in (ROOT / package).rglob("*.py")
        if not {"tests", "migrations"} & set(path.relative_to(ROOT).parts)
    )


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) for every import in the file, `from a import b` counted as both
    `a` and `a.b` (b may be a module)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            if node.module in APPS:
                found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def past_the_face(module: str) -> bool:
    """Whether importing `module` reaches into an app (anything of it but `<app>.public`)."""
    app, _, rest = module.partition(".")
    return app in APPS and rest != "public" and bool(rest)


def test_every_app_has_a_public_face():
    for app in APPS:
        assert (ROOT / app / "public.py").is_file(), f"{app}/public.py is missing"


@pytest.mark.parametrize("package", ABOVE)
def test_the_layers_above_use_the_apps_only_through_their_public_face(package):
    modules = production_modules(package)
    assert modules, f"no module found under {package}/"
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in modules
        for line, module in imported_modules(path)
        if past_the_face(module)
    ]
    assert not wrong, "use <app>.public instead:\n  " + "\n  ".join(wrong)


def test_the_check_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "sample.py"
    source.write_text(
        "from actions.public import contract\n"
        "from messaging import public\n"
        "def f():\n"
        "    from operations.models import Operation\n"
        "    import oauth.services\n"
        "    from actions import views\n"
    )
    reached = [module for _, module in imported_modules(source) if past_the_face(module)]
    assert reached == ["operations.models", "oauth.services", "actions.views"]
