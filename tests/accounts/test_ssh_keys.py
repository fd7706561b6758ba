import pytest

from starverse.accounts.models import SshKey
from starverse.accounts.sshkeys import parse_public_key
from starverse.core.errors import InvalidInput
from tests.factories import SSH_KEYS, ed25519_public_key


@pytest.mark.parametrize("name", ["k_ed", "k_rsa", "k_ec"])
def test_fingerprint_and_bits_match_ssh_keygen(name):
    recorded = SSH_KEYS[name]

    parsed = parse_public_key(recorded["public_key"])

    assert parsed.fingerprint == recorded["fingerprint"]
    assert parsed.bits == recorded["bits"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Paste an OpenSSH public key"),
        ("ssh-dss AAAAB3NzaC1kc3MAAACBAP", "Unsupported key format"),
        ("ssh-ed25519 not*base64", "not valid base64"),
        ("ssh-rsa " + SSH_KEYS["k_ed"]["public_key"].split()[1], "corrupt or does not match"),
        ("ssh-ed25519 " + SSH_KEYS["k_ed"]["public_key"].split()[1][:-8], "corrupt"),
        (SSH_KEYS["k_rsa1024"]["public_key"], "at least 2048 bits"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----", "private key"),
        (ed25519_public_key() + "\n" + ed25519_public_key(), "exactly one key"),
    ],
)
def test_invalid_keys_are_refused_with_a_reason(text, message):
    with pytest.raises(InvalidInput, match=message):
        parse_public_key(text)


def test_add_list_delete_keys_over_the_api(user, client_for):
    client = client_for(user)
    recorded = SSH_KEYS["k_ed"]

    created = client.post(
        "/api/v1/ssh-keys", {"name": "", "public_key": recorded["public_key"]}, format="json"
    )
    duplicate = client.post(
        "/api/v1/ssh-keys", {"name": "again", "public_key": recorded["public_key"]}, format="json"
    )

    assert created.status_code == 201
    body = created.json()
    assert (body["name"], body["key_type"], body["fingerprint"]) == (
        "alice@lab",
        "ssh-ed25519",
        recorded["fingerprint"],
    )
    assert duplicate.status_code == 409
    assert duplicate.json()["code"] == "duplicate_key"
    assert [k["id"] for k in client.get("/api/v1/ssh-keys").json()["results"]] == [body["id"]]
    assert client.delete(f"/api/v1/ssh-keys/{body['id']}").status_code == 204
    assert SshKey.objects.count() == 0


def test_invalid_key_over_the_api_is_a_400_and_writes_nothing(user, client_for):
    response = client_for(user).post(
        "/api/v1/ssh-keys", {"name": "x", "public_key": "ssh-rsa AAAA"}, format="json"
    )

    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert "corrupt" in response.json()["detail"]
    assert SshKey.objects.count() == 0


def test_console_ssh_key_page_adds_and_shows_errors(client, user):
    client.force_login(user)

    bad = client.post("/accounts/ssh-keys/", {"name": "x", "public_key": "hello"})
    good = client.post(
        "/accounts/ssh-keys/",
        {"name": "lab", "public_key": SSH_KEYS["k_ec"]["public_key"]},
        follow=True,
    )

    assert bad.status_code == 400
    assert "Unsupported key format" in bad.content.decode()
    assert SSH_KEYS["k_ec"]["fingerprint"] in good.content.decode()
    assert SshKey.objects.filter(user=user).count() == 1
