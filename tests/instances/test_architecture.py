"""The instances app keeps one state machine and one seam for tasks: no module but
instances/states.py locks an instance row or changes a status, no module but instances/tasks.py
imports the tasks, and no import hides inside a function (where it would hide a cycle)."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "instances"
FIRST_PARTY = {"starverse", "billing", "fleet", "storage", "instances", "datasets", "console"}


def _modules() -> dict[str, ast.Module]:
    return {
        str(path.relative_to(APP)): ast.parse(path.read_text())
        for path in sorted(APP.rglob("*.py"))
        if "migrations" not in path.parts
    }


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.module:
        return [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
    return []


def test_only_the_tasks_module_imports_the_tasks():
    importers = [
        name
        for name, tree in _modules().items()
        for node in ast.walk(tree)
        if "instances.tasks" in _imported(node) and name != "tasks.py"
    ]

    assert importers == []


def test_no_function_level_import_of_the_apps():
    # AppConfig.ready is where Django has an app import what reads models (to register it
    # with the apps below: billing's usage namers), so it is the one place allowed
    local = {
        (name, module)
        for name, tree in _modules().items()
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
        and (name, function.name) != ("apps.py", "ready")
        for node in ast.walk(function)
        for module in _imported(node)[:1]
        if module.split(".")[0] in FIRST_PARTY
    }

    assert local == set()


def test_only_the_state_machine_locks_instances_or_sets_a_status():
    offenders = set()
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            locks = isinstance(node, ast.Attribute) and node.attr == "select_for_update"
            sets_status = isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Attribute) and target.attr == "status"
                for element in node.targets
                for target in (element.elts if isinstance(element, ast.Tuple) else [element])
            )
            if (locks or sets_status) and name != "states.py":
                offenders.add(name)

    assert offenders == set()


def test_the_modules_import_down_their_layers():
    """The instances-layers contract in pyproject.toml: tasks, provisioning, services, the
    state machine, charges and placement, models, each importing only those below it."""
    # in a process of its own: import-linter reconfigures logging, which would mute other tests
    linter = Path(sys.executable).with_name("lint-imports")
    config = str(ROOT / "pyproject.toml")
    result = subprocess.run(
        [str(linter), "--config", config, "--contract", "instances-layers", "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 0, result.stdout + result.stderr
