"""Links to the admin's change pages quote the object's id as the admin does: our ids have an
underscore after their prefix, and the admin reads `_` and the hex code of one of the
characters it escapes (`_2F` is "/", `_3A` ":", `_5F` "_" …) as that character, so about one id
in two hundred made a raw link to a page that says the object does not exist (the operators'
e-mails about disputes and refunds, the admin's own cross-links and redirects; and now and then
a test of them failed)."""

from starverse.accounts.models import SshKey
from starverse.core.adminurls import admin_change_url
from tests.factories import ed25519_public_key, make_operator, make_user, staff_login

TRAP = "key_2FAbCdEfGhIjKlMnOpQ"  # `_2F` reads as "/" in the admin's URL escaping


def test_the_link_quotes_the_id_as_the_admin_reads_it():
    assert admin_change_url("accounts_sshkey", TRAP) == (
        "/admin/accounts/sshkey/key_5F2FAbCdEfGhIjKlMnOpQ/change/"
    )
    assert admin_change_url("accounts_sshkey", "key_abc") == (
        "/admin/accounts/sshkey/key_5Fabc/change/"
    )


def test_an_id_that_looks_escaped_opens_its_own_page(client, db):
    staff_login(client, make_operator())
    key = SshKey.objects.create(
        id=TRAP,
        user=make_user(),
        name="trap",
        key_type="ssh-ed25519",
        public_key=ed25519_public_key(),
        fingerprint="SHA256:trap",
    )

    page = client.get(admin_change_url("accounts_sshkey", key.pk))
    raw = client.get(f"/admin/accounts/sshkey/{key.pk}/change/")

    assert page.status_code == 200 and "SHA256:trap" in page.content.decode()
    assert (raw.status_code, raw.url) == (302, "/admin/")  # the raw id names no object
