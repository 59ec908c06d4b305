"""`chain/` and `evm/` import no app and no Django, so the local chain stack and the EVM
primitives work (and can be reused) outside the Django project.

Two checks, because each misses what the other sees: the AST scan reads every import statement
(function-level ones too, which an import-time check never runs); the fresh interpreter sees
what imports pull in transitively."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("chain", "evm")
# Every app of the project (each top-level package besides these two), and Django itself.
APPS = sorted(
    p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name not in PACKAGES
) + ["templates"]
DJANGO = ("django", "rest_framework", "oauth2_provider", "template_partials")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel.parts[1] in ("node_modules", "build"):
                continue
            parts = rel.with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _forbidden(name: str) -> bool:
    top = name.split(".")[0]
    return top in APPS or top in DJANGO or top.startswith("django_")


def forbidden_imports(source: str, filename: str = "<source>") -> list[str]:
    """`file:line name` for each import statement of an app or of Django."""
    hits = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue  # relative imports stay inside the package
        hits += [(node.lineno, name) for name in names if _forbidden(name)]
    return [f"{filename}:{line} {name}" for line, name in sorted(hits)]


def test_the_apps_are_all_forbidden():
    assert {"actions", "messaging", "operations", "picnic", "mcp_adapter", "templates"} <= set(APPS)


def test_the_scan_finds_a_forbidden_import_wherever_it_is():
    source = "import json\ndef f():\n    from actions.models import Action\nimport django.conf\n"
    assert forbidden_imports(source) == ["<source>:3 actions.models", "<source>:4 django.conf"]
    assert forbidden_imports("from chain import contracts\nfrom . import stack\n") == []


def test_no_module_of_chain_or_evm_imports_an_app_or_django():
    modules = _modules()
    assert {"chain.stack", "chain.simple_account", "evm.bundler", "evm.userops"} <= set(modules)
    hits = []
    for path in modules.values():
        hits += forbidden_imports(path.read_text(), str(path.relative_to(ROOT)))
    assert hits == []


def test_importing_every_module_of_chain_and_evm_loads_no_app_and_no_django():
    names = sorted(_modules())
    code = (
        "import importlib, json, sys\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert set(names) <= set(loaded)
    assert [name for name in loaded if _forbidden(name)] == []
