"""Each app's public face: the modules other apps may import, and only those (docs/architecture.md
names them app by app). The import contracts (`lint-imports`) say which apps an app may import;
this says which of their modules. Read from the import graph of product code, the way the
contracts read it (import-linter's grimp); the URL map, the settings and migrations are left
out (the URL map mounts every app's routes, migrations import what their rows were made with).

A new import of another app's inner module fails here: use its face, or widen the face on
purpose (here and in the architecture page); a module no other app imports any more leaves it."""

from collections import defaultdict

import grimp

from tests.product_code import PRODUCT_PACKAGES, ROOT

# The kernel is everyone's (STYLE: starverse.core is imported freely).
OPEN = {"starverse", "starverse.core"}
# Importers that are not an app's code.
NOT_AN_APP = ("starverse.urls", "starverse.settings", "starverse.celery", "starverse.wsgi")

PUBLIC_FACES = {
    "starverse.accounts": {
        "access",
        "admin",
        "audit",
        "loginflow",
        "middleware",
        "models",
        "selectors",
        "services",
        "signals",
        "teams",
        "token_cache",
        "tokens",
        "verification",
    },
    "billing": {
        "api.serializers",
        "calculator",
        "choices",
        "holds",
        "models",
        "notices",
        "onboarding",
        "selectors",
        "services",
        "signals",
        "usage",
    },
    "fleet": {"choices", "models", "selectors", "services", "signals"},
    # every product reports its events through emit; clusters ask whether one recovered;
    # opening an account gives it its default e-mail channel
    "events": {"channels", "choices", "emit", "selectors"},
    "datasets": {"choices", "models", "views"},
    "compute": {
        "admission",
        "choices",
        "dryrun",
        "holdings",
        "images",
        "metering",
        "models",
        "orders",
        "placement",
        "preemption",
        "pricing",
        "queue",
        "selectors",
    },
    "storage": {
        "billing",
        "choices",
        "disks",
        "manifests",
        "models",
        "nas",
        "provisioning",
        "selectors",
        "views",
    },
    "instances": {
        "api.gateway",
        "autostop",
        "budgets",
        "charges",
        "choices",
        "gangs",
        "gateway",
        "lifecycle",
        "models",
        "preemption",
        "provisioning.converge",
        "provisioning.manifests",
        "provisioning.namespaces",
        "selectors",
        "signals",
        "states",
        "terminals",
    },
    "endpoints": {"services"},
    # (the jobs app reads a cluster's launch templates' names)
    # the jobs app: a multi-node job owns a cluster (docs/architecture.md, clusters)
    "clusters": {"choices", "models", "pods", "ranks", "services"},
    # nothing imports these apps: their faces are empty
    "jobs": set(),
    "console": set(),
    "terminal": set(),
    "teams": set(),
    "nodeagent": set(),
}


def _app_of(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "starverse" and len(parts) > 1 and parts[1] in ("accounts", "core"):
        return f"starverse.{parts[1]}"
    return parts[0]


def _imported_across() -> dict[str, set[str]]:
    """For each app, the modules of it that another app's code imports."""
    graph = grimp.build_graph(
        *PRODUCT_PACKAGES, include_external_packages=False, exclude_type_checking_imports=True
    )
    found: dict[str, set[str]] = defaultdict(set)
    for importer in graph.modules:
        if importer.startswith(NOT_AN_APP) or ".migrations" in importer:
            continue
        for imported in graph.find_modules_directly_imported_by(importer):
            source, target = _app_of(importer), _app_of(imported)
            if source != target and target not in OPEN:
                found[target].add(imported.removeprefix(target + "."))
    return found


def test_apps_import_only_each_others_public_face():
    found = _imported_across()
    beyond = {
        app: sorted(modules - PUBLIC_FACES.get(app, set()))
        for app, modules in found.items()
        if modules - PUBLIC_FACES.get(app, set())
    }
    assert beyond == {}, f"imports past a public face: {beyond}"
    # and every face is what other apps use: nothing listed that nobody imports
    unused = {
        app: sorted(face - found.get(app, set()))
        for app, face in PUBLIC_FACES.items()
        if face - found.get(app, set())
    }
    assert unused == {}, f"public faces nobody imports (drop them): {unused}"


def test_every_app_has_a_face_and_a_folder():
    folders = {path.name for path in ROOT.iterdir() if (path / "apps.py").exists()}
    apps = {app.split(".")[-1] for app in PUBLIC_FACES}
    assert folders <= apps | {"accounts"}
