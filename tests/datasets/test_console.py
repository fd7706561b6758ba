import pytest
from django.utils import translation

from tests.datasets.conftest import make_entry

URL = "/console/datasets/"


def test_anonymous_visitors_are_sent_to_log_in(client, pool):
    response = client.get(URL)

    assert response.status_code == 302
    assert response["Location"] == f"/accounts/login/?next={URL}"


def test_the_url_without_a_slash_redirects(client, user):
    client.force_login(user)

    response = client.get("/console/datasets")

    assert response.status_code == 301
    assert response["Location"] == URL


def test_the_page_lists_the_pool_with_sizes_and_copy_commands(client, user, pool):
    client.force_login(user)

    response = client.get(URL)

    html = response.content.decode()
    assert response.status_code == 200
    assert 'data-dataset="llama-3-8b-instruct"' in html
    assert 'data-dataset="belle-instructions"' in html
    assert "retired-corpus" not in html and "Retired corpus" not in html
    assert "16.1 GB" in html and "5.6 GB" in html
    assert "Llama 3 Community License" in html and "2023-04" in html
    assert '<code class="secret-value mono command-line" id="cmd-llama-3-8b-instruct">' in html
    assert "cp -r /public/models/Meta-Llama-3-8B-Instruct ./</code>" in html
    assert "cp -r /public/data/BELLE ./</code>" in html
    assert 'data-copy="#cmd-belle-instructions"' in html
    assert "read-only and mounted in every instance" in html
    assert 'href="/console/datasets/" aria-current="page"' in html
    assert "Coming soon" not in html and "{{" not in html


@pytest.mark.parametrize(
    ("params", "shown", "hidden"),
    [
        ({"q": "belle"}, "belle-instructions", "llama-3-8b-instruct"),
        ({"q": "LLAMA"}, "llama-3-8b-instruct", "belle-instructions"),
        ({"kind": "model"}, "llama-3-8b-instruct", "belle-instructions"),
        ({"kind": "dataset"}, "belle-instructions", "llama-3-8b-instruct"),
        ({"kind": "dataset", "q": "中文"}, "belle-instructions", "llama-3-8b-instruct"),
    ],
)
def test_search_and_kind_filter(client, user, pool, params, shown, hidden):
    client.force_login(user)

    html = client.get(URL, params).content.decode()

    assert f'data-dataset="{shown}"' in html
    assert f'data-dataset="{hidden}"' not in html
    assert "Showing 1 of 1" in html
    assert 'href="/console/datasets/">Clear</a>' in html


def test_the_form_keeps_what_was_asked(client, user, pool):
    client.force_login(user)

    html = client.get(URL, {"q": "llama", "kind": "model"}).content.decode()

    assert 'name="q" value="llama"' in html
    assert '<option value="model" selected>' in html


def test_an_unknown_kind_on_the_page_shows_everything(client, user, pool):
    client.force_login(user)

    html = client.get(URL, {"kind": "video"}).content.decode()

    assert html.count('data-dataset="') == 2


def test_nothing_matching_shows_an_empty_state(client, user, pool):
    client.force_login(user)

    html = client.get(URL, {"q": "no such model anywhere"}).content.decode()

    assert 'data-dataset="' not in html
    assert "Nothing matches your search" in html


def test_an_empty_pool_says_so(client, user):
    client.force_login(user)

    html = client.get(URL).content.decode()

    assert "The public pool is empty" in html
    assert "Nothing matches your search" not in html


def test_the_page_renders_in_chinese(client, user, pool):
    client.force_login(user)

    response = client.get(URL, HTTP_ACCEPT_LANGUAGE="zh-CN,zh;q=0.9")

    html = response.content.decode()
    assert response.status_code == 200
    assert 'lang="zh-hans"' in html
    with translation.override("zh-hans"):
        assert translation.gettext("Datasets") in html
    assert "cp -r /public/data/BELLE ./</code>" in html


def test_many_entries_are_paged_and_pages_keep_the_filters(client, user, db):
    for number in range(51):
        make_entry(f"set-{number:02d}", name=f"Set {number:02d}", tags="bulk")
    client.force_login(user)

    html = client.get(URL, {"q": "bulk"}).content.decode()

    assert html.count('data-dataset="') == 50
    assert 'href="?page=2&amp;q=bulk" rel="next"' in html
    second = client.get(URL, {"q": "bulk", "page": 2}).content.decode()
    assert second.count('data-dataset="') == 1
