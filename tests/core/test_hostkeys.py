"""Host keys made in-process are what OpenSSH reads, and their fingerprint is the one
`ssh-keygen -l` and ssh's first-connection prompt print."""

import subprocess

from starverse.core.hostkeys import host_key_from_private, host_key_generate


def _keygen(*args: str) -> str:
    return subprocess.run(
        ["ssh-keygen", *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_the_fingerprint_is_the_one_ssh_keygen_prints(tmp_path):
    key = host_key_generate()
    private = tmp_path / "ssh_host_ed25519_key"
    private.write_text(key.private_openssh)
    private.chmod(0o600)
    public = tmp_path / "ssh_host_ed25519_key.pub"
    public.write_text(key.public_openssh + "\n")

    printed = _keygen("-l", "-E", "sha256", "-f", str(public))

    assert printed.split()[1] == key.fingerprint
    assert printed.endswith("(ED25519)")
    # the private half is an unencrypted OpenSSH key whose public half is the one given
    assert _keygen("-y", "-f", str(private)) == key.public_openssh
    assert key.private_openssh.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")


def test_a_stored_key_reads_back_to_the_same_pair():
    key = host_key_generate()

    again = host_key_from_private(key.private_openssh)

    assert again == key
    assert host_key_generate().fingerprint != key.fingerprint


def test_the_private_half_never_shows_in_a_repr():
    key = host_key_generate()

    assert "PRIVATE" not in repr(key)
    assert key.fingerprint in repr(key)
