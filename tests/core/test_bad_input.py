"""Console pages refuse NUL bytes with a 400 before any form or query sees them (PostgreSQL
cannot store or compare them), and nothing is written."""

from django.contrib.auth import get_user_model
from django.test import Client

from tests.factories import PASSWORD, make_user


def test_a_nul_byte_in_the_signup_form_is_a_400_and_no_account(db):
    before = get_user_model().objects.count()

    response = Client().post(
        "/accounts/signup/", {"email": "nul\x00@lab.example.edu.cn", "password1": PASSWORD}
    )

    assert response.status_code == 400
    assert get_user_model().objects.count() == before


def test_a_nul_byte_in_the_login_form_is_a_400(db):
    user = make_user()

    browser = Client()

    response = browser.post("/accounts/login/", {"username": user.email, "password": "\x00"})

    assert response.status_code == 400
    assert "_auth_user_id" not in browser.session


def test_a_nul_byte_in_the_datasets_search_is_a_400(db):
    browser = Client()
    browser.force_login(make_user())

    assert browser.get("/console/datasets/?q=x").status_code == 200
    assert browser.get("/console/datasets/?q=%00").status_code == 400


def test_an_oversized_form_is_a_413(db, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000

    response = Client().post("/accounts/login/", {"username": "x" * 2000, "password": "y"})

    assert response.status_code == 413
