"""ARCHITECTURE.md's layer table: every import points down it, and the two lowest layers load
no framework.

Layers, lowest first: ``policy`` and ``store`` (each imports nothing of ours but itself),
``trainers``, ``mlflow_plugin``, ``tasks``, ``flows``, ``tenantml``. A folder may import itself
and the layers below it. Imports are read from the source with `ast`, so an import inside a
function counts as much as one at the top of a module.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("policy", "store", "trainers", "mlflow_plugin", "tasks", "flows", "tenantml")
ALLOWED: dict[str, frozenset[str]] = {
    "policy": frozenset({"policy"}),
    "store": frozenset({"store"}),
    **{layer: frozenset(LAYERS[: i + 1]) for i, layer in enumerate(LAYERS) if i >= 2},
}
# Third-party packages each of the lowest layers may import at all (stdlib is always allowed).
PURE_DEPENDENCIES: dict[str, frozenset[str]] = {
    "policy": frozenset({"numpy", "scipy", "sklearn"}),
    "store": frozenset({"numpy", "boto3", "botocore", "PIL"}),
}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in one file, nested ones included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                found.append((node.lineno, ".".join([*base, *filter(None, [node.module])])))
            elif node.module:
                found.append((node.lineno, node.module))
    return found


def _sources(layer: str) -> list[Path]:
    return sorted((ROOT / layer).rglob("*.py"))


def test_the_table_covers_every_code_folder() -> None:
    """A new top-level package must be placed in the table before it can be imported."""
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert packages - {"tests"} == set(LAYERS)


@pytest.mark.parametrize("layer", LAYERS)
def test_no_upward_import(layer: str) -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in _sources(layer)
        for line, module in imported_modules(path)
        if module.split(".")[0] in LAYERS and module.split(".")[0] not in ALLOWED[layer]
    ]
    assert bad == [], f"{layer}/ may import only {sorted(ALLOWED[layer])}:\n" + "\n".join(bad)


@pytest.mark.parametrize("layer", LAYERS)
def test_no_import_of_another_layers_private_module(layer: str) -> None:
    """A layer uses another through its public names (principle 12): no ``other._module``."""
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in _sources(layer)
        for line, module in imported_modules(path)
        if module.split(".")[0] in LAYERS
        and module.split(".")[0] != layer
        and any(part.startswith("_") for part in module.split(".")[1:])
    ]
    assert bad == [], "\n".join(bad)


@pytest.mark.parametrize("layer", sorted(PURE_DEPENDENCIES))
def test_lowest_layers_use_only_their_libraries(layer: str) -> None:
    allowed = PURE_DEPENDENCIES[layer] | set(sys.stdlib_module_names) | {"__future__", layer}
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in _sources(layer)
        for line, module in imported_modules(path)
        if module.split(".")[0] not in allowed
    ]
    assert bad == [], "\n".join(bad)


def test_checker_sees_nested_and_relative_imports(tmp_path: Path) -> None:
    """The scan is not vacuous: an import inside a function and a relative import are found."""
    pkg = ROOT / "trainers"
    probe = pkg / "_layering_probe.py"
    probe.write_text("def f():\n    import tasks.settings\n    from . import zoo\n")
    try:
        assert (2, "tasks.settings") in imported_modules(probe)
        assert (3, "trainers") in imported_modules(probe)
    finally:
        probe.unlink()


def _loaded(imports: str, frameworks: tuple[str, ...]) -> list[str]:
    code = (
        f"import sys, {imports}\n"
        f"print(','.join(sorted(m for m in {frameworks!r} if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [m for m in out.stdout.strip().split(",") if m]


FRAMEWORKS = ("prefect", "mlflow", "torch", "torchvision", "boto3", "optuna")


def test_policy_loads_no_framework() -> None:
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in _sources("policy")
    )
    assert _loaded(", ".join(modules), FRAMEWORKS) == []


def test_store_loads_no_framework() -> None:
    """The data layer every layer reads: no torch, Prefect or MLflow (boto3 only on S3 use)."""
    modules = "store, store.schema, store.limits, store.loaders"
    assert _loaded(modules, FRAMEWORKS) == []


def test_settings_load_no_framework() -> None:
    """Every command reads `tasks.settings` first; Prefect must not be imported before
    `Settings.apply` exports PREFECT_API_URL (it reads its settings once, at import: a scheduler
    on servers ran on a temporary Prefect server of its own when it was)."""
    assert _loaded("tasks.settings", ("prefect", "mlflow", "torch")) == []


def test_the_scheduler_options_load_no_framework() -> None:
    """`tenantml run` checks its options by the flow's rules before Prefect's server starts."""
    code = "tasks.options, tasks.options as o; o.option_problems(policy='x', seer_tuner='y')"
    assert _loaded(code, FRAMEWORKS) == []


def test_trainers_import_no_orchestration() -> None:
    """trainers/ may use torch (lazily), never Prefect or MLflow (ARCHITECTURE layers)."""
    assert _loaded("trainers", ("prefect", "mlflow", "torch")) == []
