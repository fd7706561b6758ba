"""Product code, as the tests that read its source see it: every module of the product's
packages outside `migrations/` folders (tests, the stand-ins in devstack, the CLI and bench are
not product code)."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT_PACKAGES = (
    "starverse",
    "billing",
    "fleet",
    "compute",
    "storage",
    "instances",
    "clusters",
    "jobs",
    "endpoints",
    "datasets",
    "console",
    "terminal",
    "teams",
    "events",
    "nodeagent",
)


def product_files() -> list[Path]:
    """The product modules, relative to the repository's root, migrations left out."""
    return [
        path.relative_to(ROOT)
        for package in PRODUCT_PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.relative_to(ROOT).parts
    ]


def module_of(relative: Path) -> str:
    """The dotted module name of a file relative to the root (a package is its __init__)."""
    return ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
