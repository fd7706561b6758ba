"""The models as a database migrated back and forth has them, for the migration tests."""

from typing import Any

from django.db.migrations.executor import MigrationExecutor


def migrated_apps(executor: MigrationExecutor) -> Any:
    """The models as the database has them now: the state of the migrations applied to it (an
    app whose migration depends on one just unapplied, as jobs' does on instances', is
    unapplied with it, so its leaf is no longer a state the database is in)."""
    executor.loader.build_graph()
    graph = executor.loader.graph
    return executor.loader.project_state(
        [node for node in executor.loader.applied_migrations if node in graph.nodes]
    ).apps
