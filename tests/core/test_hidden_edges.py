"""Hidden edges: an app reaching another app it may not import (one above it, or a sibling)
without an import statement, so the import contracts (`lint-imports`) cannot see it.

Counted over product code by reading its syntax trees:
- a model looked up by name (`apps.get_model(...)`), or through another model's field
  (`.related_model`, `.remote_field.model`), or through an object's class (`type(x).objects`);
- a task of an app the module may not import, named in a string (`"clusters.tasks.x"`);
- a module of such an app imported by name (`import_module("...")`, `import_string("...")`).

An app that needs to tell an app above it something sends a signal (`instances.signals`) or
calls what that app registered (billing.usage.resource_namer_register); the count is zero and
may only stay there."""

import ast
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tests.product_code import ROOT, module_of, product_files

BASELINE = 0
NOT_PRODUCT = {"migrations", "settings", "management"}
TASK_NAME = re.compile(r"^([a-z_]+)\.tasks\.[a-z_]+$")
DOTTED = re.compile(r"^([a-z_]+)(\.[a-z_]+)*$")


def _layers() -> list[set[str]]:
    """The apps contract's layers, top first, each a set of packages."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (apps,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == "apps"]
    return [{name.strip() for name in layer.split("|")} for layer in apps["layers"]]


LAYERS = _layers()


def _app_of(module: str) -> str | None:
    """The layer entry a dotted module belongs to (the longest one that is its prefix)."""
    found = [
        name
        for layer in LAYERS
        for name in layer
        if module == name or module.startswith(name + ".")
    ]
    return max(found, key=len) if found else None


def _level(app: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if app in layer)


def may_reach(source: str, target: str) -> bool:
    """Whether app `source` may import app `target`: itself, or one below it."""
    return source == target or _level(target) > _level(source)


@dataclass(frozen=True)
class Edge:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def _name_target(text: str) -> str | None:
    """The app a string names, as a task or as a dotted module of a known app."""
    task = TASK_NAME.match(text)
    if task:
        return _app_of(task.group(1))
    if DOTTED.match(text) and "." in text:
        return _app_of(text)
    return None


def _called(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def edges_in(source: str, module: str, path: str = "<source>") -> list[Edge]:
    """The hidden edges in the code of `module` (a dotted name, for its app)."""
    app = _app_of(module)
    tree = ast.parse(source)
    found: list[Edge] = []

    def edge(node: ast.AST, what: str) -> None:
        found.append(Edge(path, getattr(node, "lineno", 0), what))

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            called = _called(node)
            if called == "get_model":
                edge(node, "model looked up by name (get_model)")
            if called in ("import_module", "import_string") and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    target = _name_target(first.value)
                    if app and target and not may_reach(app, target):
                        edge(node, f"module of {target} imported by name")
        elif isinstance(node, ast.Attribute):
            if node.attr == "related_model":
                edge(node, "model reached through a field (related_model)")
            if (
                node.attr == "model"
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "remote_field"
            ):
                edge(node, "model reached through a field (remote_field.model)")
            if (
                node.attr == "objects"
                and isinstance(node.value, ast.Call)
                and _called(node.value) == "type"
            ):
                edge(node, "model reached through an object's class (type(x).objects)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            task = TASK_NAME.match(node.value)
            target = _app_of(task.group(1)) if task else None
            if app and target and not may_reach(app, target):
                edge(node, f"task of {target} named: {node.value}")
    return found


def _product_files() -> list[tuple[Path, str]]:
    """Product code less its settings and management commands (the beat schedule and seeding
    name tasks and models of every app by design)."""
    return [
        (relative, module_of(relative))
        for relative in product_files()
        if relative.parts[0] in {n.split(".")[0] for layer in LAYERS for n in layer}
        and not NOT_PRODUCT & set(relative.parts)
    ]


def hidden_edges() -> list[Edge]:
    edges = []
    for relative, module in _product_files():
        edges += edges_in((ROOT / relative).read_text(), module, str(relative))
    return edges


def test_product_code_has_no_hidden_edges():
    edges = hidden_edges()
    assert len(edges) <= BASELINE, "hidden edges:\n" + "\n".join(map(str, edges))


def test_the_scan_reads_every_app():
    modules = {module.split(".")[0] for _, module in _product_files()}
    assert {"instances", "clusters", "endpoints", "billing", "compute", "storage"} <= modules
    assert not any("migrations" in str(path) for path, _ in _product_files())


def test_each_kind_of_hidden_edge_is_found():
    source = """
from django.apps import apps
from importlib import import_module

def f(cluster, instance):
    Endpoint = apps.get_model("endpoints", "Endpoint")
    type(cluster).objects.filter(pk=1)
    instance._meta.get_field("cluster").related_model
    instance._meta.get_field("cluster").remote_field.model
    enqueue_on_commit("clusters.tasks.preflight_cluster", "clu_1")
    import_module("endpoints.scheduler")
"""
    found = sorted(edge.what for edge in edges_in(source, "instances.states"))
    assert found == sorted(
        [
            "model looked up by name (get_model)",
            "model reached through an object's class (type(x).objects)",
            "model reached through a field (related_model)",
            "model reached through a field (remote_field.model)",
            "task of clusters named: clusters.tasks.preflight_cluster",
            "module of endpoints imported by name",
        ]
    )


def test_what_an_app_may_import_is_no_hidden_edge():
    source = """
def f():
    enqueue_on_commit("instances.tasks.provision_instance", "ins_1")
    enqueue_on_commit("billing.tasks.expire_holds")
    import_module("instances.selectors")
"""
    assert edges_in(source, "clusters.services") == []
    assert edges_in(source, "instances.states") == []


def test_a_sibling_is_not_reached_by_name_either():
    source = 'send("endpoints.tasks.sync_endpoints")\n'
    assert [e.what for e in edges_in(source, "clusters.tasks")] == [
        "task of endpoints named: endpoints.tasks.sync_endpoints"
    ]
