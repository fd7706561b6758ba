"""docs/openapi.yaml is what the code generates: clients are built from the committed file, so
it must never drift from the code."""

from pathlib import Path

from django.core.management import call_command

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"


def test_committed_schema_is_what_the_code_generates(tmp_path, db):
    generated = tmp_path / "openapi.yaml"

    # --fail-on-warn: an operation without an explicit operation_id, or a body spectacular
    # cannot describe, is an error here, not a guess in the file
    call_command("spectacular", file=str(generated), validate=True, fail_on_warn=True)

    assert COMMITTED.exists(), "docs/openapi.yaml is missing: run `make schema` and commit it"
    assert generated.read_text() == COMMITTED.read_text(), (
        "docs/openapi.yaml differs from what the code generates: run `make schema` and commit "
        "the result (and check that the difference is the one you meant)"
    )
