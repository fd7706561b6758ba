from typing import Any

import pytest

LLAMA = {
    "id": "llama-3-8b-instruct",
    "name": "Llama 3 8B Instruct",
    "kind": "model",
    "version": "3.0",
    "size_bytes": 16_060_522_496,
    "licence": "Llama 3 Community License",
    "description": "Meta's 8B instruction-tuned model.",
    "path": "/public/models/Meta-Llama-3-8B-Instruct",
    "homepage": "https://example.org/llama",
    "tags": ["llm", "chat", "english"],
}


def _ids(response: Any) -> list[str]:
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["results"]]


def test_list_is_public_paginated_and_hides_inactive_entries(api, pool):
    response = api.get("/api/v1/datasets")

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"count", "next", "previous", "results"}
    assert (body["count"], body["next"], body["previous"]) == (2, None, None)
    assert body["results"][0] == LLAMA
    belle = body["results"][1]
    assert belle["id"] == "belle-instructions"
    assert belle["kind"] == "dataset"
    assert belle["path"] == "/public/data/BELLE"
    assert belle["homepage"] is None
    assert "retired-corpus" not in response.content.decode()


def test_list_pages_with_page_size(api, pool):
    first = api.get("/api/v1/datasets?page_size=1").json()

    assert first["count"] == 2
    assert [row["id"] for row in first["results"]] == ["llama-3-8b-instruct"]
    assert "page=2" in first["next"]


def test_a_token_is_not_needed_but_does_no_harm(client_for, user, pool):
    assert _ids(client_for(user).get("/api/v1/datasets")) == [
        "llama-3-8b-instruct",
        "belle-instructions",
    ]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("model", ["llama-3-8b-instruct"]), ("dataset", ["belle-instructions"]), ("", None)],
)
def test_kind_filter(api, pool, kind, expected):
    ids = _ids(api.get("/api/v1/datasets", {"kind": kind}))

    assert ids == (expected or ["llama-3-8b-instruct", "belle-instructions"])


@pytest.mark.parametrize("kind", ["video", "MODEL", "models", "dataset,model"])
def test_an_unknown_kind_is_a_400_in_the_error_shape(api, pool, kind):
    response = api.get("/api/v1/datasets", {"kind": kind})

    assert response.status_code == 400
    assert response.json() == {"detail": "kind must be one of: dataset, model.", "code": "invalid"}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("LLAMA", ["llama-3-8b-instruct"]),  # name, any case
        ("8b-instr", ["llama-3-8b-instruct"]),  # id
        ("fine-tuning", ["belle-instructions"]),  # description
        ("中文", ["belle-instructions"]),  # tags
        ("Chinese", ["belle-instructions"]),  # the hidden entry matches too, and stays hidden
        ("instruct", ["llama-3-8b-instruct", "belle-instructions"]),
        ("llama chat", ["llama-3-8b-instruct"]),  # every word must match somewhere
        ("llama 中文", []),
        ("mistral", []),
        ("  ", ["llama-3-8b-instruct", "belle-instructions"]),
    ],
)
def test_q_searches_name_id_description_and_tags(api, pool, query, expected):
    assert _ids(api.get("/api/v1/datasets", {"q": query})) == expected


def test_kind_and_q_combine(api, pool):
    assert _ids(api.get("/api/v1/datasets", {"kind": "model", "q": "chinese"})) == []
    assert _ids(api.get("/api/v1/datasets", {"kind": "dataset", "q": "chinese"})) == [
        "belle-instructions"
    ]


def test_detail(api, pool):
    response = api.get("/api/v1/datasets/llama-3-8b-instruct")

    assert response.status_code == 200
    assert response.json() == LLAMA


@pytest.mark.parametrize("dataset_id", ["retired-corpus", "no-such-thing"])
def test_detail_of_an_inactive_or_unknown_entry_is_404(api, pool, dataset_id):
    response = api.get(f"/api/v1/datasets/{dataset_id}")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


def test_openapi_schema_has_the_datasets_endpoints(api, db):
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    assert {"/api/v1/datasets", "/api/v1/datasets/{dataset_id}"} <= set(schema["paths"])
    parameters = schema["paths"]["/api/v1/datasets"]["get"]["parameters"]
    kind = next(p for p in parameters if p["name"] == "kind")
    assert kind["schema"]["enum"] == ["dataset", "model"]
    assert {"q", "page", "page_size"} <= {p["name"] for p in parameters}
