"""A cluster rank's SSH to its fellow ranks, end to end without a container runtime: two ranks'
scratch roots laid out as the platform mounts them (the access Secret, the cluster's shared
key Secret rendered by clusters.pods), rank 1's init running Debian's real
sshd, and rank 0's root logging in to it with the ssh_config the init installed: the cluster's
key, no password, no prompt, the host checked against the ranks' host keys, and the rank's
launcher environment in the session.

sshd must be installed (.ci/run installs openssh-server): without it this test fails. The set-up
is the real-sshd tests' shared one (tests/sshd.py)."""

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from starverse_init.access import keys_sync
from starverse_init.cluster import BEGIN, END, cluster_ssh_install, ssh_config_merge
from starverse_init.config import Config

from clusters import pods
from clusters.models import Cluster
from clusters.models import Rank as ClusterRank
from starverse.core.hostkeys import HostKey, host_key_generate
from tests.sshd import InitRoot, secret_write, sshd_scratch

CLUSTER = "clu_E2E"
LAYOUT = pods.Layout(cluster_id=CLUSTER, node_count=2, gpus_per_node=8, template="deepspeed")


def _cluster_secret(root: Path, key: HostKey, host_keys: list[HostKey], version: int = 1) -> Path:
    cluster = Cluster(id=CLUSTER, tenant_id="ten_E2E")
    rows = [
        pods.RankHost(index, f"ins_{index}", host.private_openssh)
        for index, host in enumerate(host_keys)
    ]
    rendered = pods.ssh_key_secret(
        ClusterRank(cluster=cluster),
        key.private_openssh,
        pods.known_hosts(rows, LAYOUT),
        LAYOUT,
    )
    directory = root / "etc" / "starverse" / "cluster-ssh"
    secret_write(directory, rendered["stringData"], version=version)
    return directory


class Rank(InitRoot):
    """A rank's init root: the launcher's environment, no instance's."""

    def __init__(self, root: Path, index: int, host_key: HostKey) -> None:
        super().__init__(root, host_key)
        self.index = index

    def env(self) -> dict[str, str]:
        return self.init_env() | {
            "STARVERSE_STOP_DEADLINE_S": "5",
            "STARVERSE_CLUSTER_ID": CLUSTER,
            "MASTER_ADDR": LAYOUT.master_addr,
            "NODE_RANK": str(self.index),
            "NNODES": "2",
            "NPROC_PER_NODE": "8",
            "WORLD_SIZE": "16",
        }


@pytest.fixture
def two_ranks(sshd_root: Path) -> Iterator[tuple[Rank, Rank]]:
    with sshd_scratch() as other:
        made = [
            Rank(root, index, host_key_generate()) for index, root in enumerate([sshd_root, other])
        ]
        try:
            yield made[0], made[1]
        finally:
            for rank in made:
                rank.kill()


def _ssh_from(rank: Rank, to: Rank, command: str) -> subprocess.CompletedProcess[str]:
    """ssh as rank 0's root would run it (`ssh clu-e2e-1.clu-e2e …`, root's ssh_config and
    nothing else); only the address is overridden, the test having no cluster DNS. The host
    key is looked up under the rank's name, as it is in the cluster."""
    host = pods.rank_host(CLUSTER, to.index)
    return subprocess.run(
        [
            "ssh",
            "-F",
            str(rank.root / "root" / ".ssh" / "config"),
            "-o",
            "HostName=127.0.0.1",
            "-o",
            f"Port={to.port}",
            "-o",
            f"HostKeyAlias={host}",
            "-o",
            "ConnectTimeout=10",
            host,
            command,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


def test_ranks_log_in_to_each_other_with_the_cluster_key(two_ranks):
    first, second = two_ranks
    key = host_key_generate()
    host_keys = [first.host_key, second.host_key]
    for rank in two_ranks:
        _cluster_secret(rank.root, key, host_keys)
        rank.secret("")  # the user chose no key: only the cluster's key opens it
    second.boot()
    assert cluster_ssh_install(Config.from_env(first.env()))

    session = _ssh_from(first, second, 'printf "%s|%s|%s" "$NODE_RANK" "$NNODES" "$MASTER_ADDR"')
    assert session.returncode == 0, session.stderr + second.log.read_text()
    assert session.stdout == "1|2|clu-e2e-0.clu-e2e"
    assert "Warning" not in session.stderr  # the host was known: no prompt, no "added" line
    assert not (first.root / "root" / ".ssh" / "known_hosts").exists()

    # a rank answering with another host key is refused, never accepted anew
    other = host_key_generate()
    _cluster_secret(first.root, key, [first.host_key, other], version=2)
    refused = _ssh_from(first, second, "true")
    assert refused.returncode == 255
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in refused.stderr


def test_the_cluster_key_is_installed_for_root_and_authorized(tmp_path):
    key = host_key_generate()
    _cluster_secret(tmp_path, key, [host_key_generate(), host_key_generate()])
    config = Config.from_env({"STARVERSE_ROOT": str(tmp_path), "PATH": "/usr/bin:/bin"})
    ssh = tmp_path / "root" / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "config").write_text("Host laptop\n    User me\n")
    assert cluster_ssh_install(config)
    assert (ssh / "id_ed25519").read_text() == key.private_openssh
    assert os.stat(ssh / "id_ed25519").st_mode & 0o777 == 0o600
    assert (ssh / "id_ed25519.pub").read_text().startswith(key.public_openssh + " ")
    written = (ssh / "config").read_text()
    assert written.startswith(BEGIN + "\nHost clu-e2e-* *.clu-e2e\n")
    assert "StrictHostKeyChecking accept-new" in written
    assert f"IdentityFile {ssh}/id_ed25519" in written
    assert f"{tmp_path}/etc/starverse/cluster-ssh/known_hosts" in written
    assert written.endswith(f"{END}\n\nHost laptop\n    User me\n")
    # again (every start): the block is replaced, the user's lines kept once
    assert ssh_config_merge(written, "Host x\n") == f"{BEGIN}\nHost x\n{END}\n\n" + (
        "Host laptop\n    User me\n"
    )

    keys_sync(config)
    assert (ssh / "authorized_keys").read_text().startswith(key.public_openssh + " ")


def test_a_lone_instance_gets_no_cluster_ssh(tmp_path):
    config = Config.from_env({"STARVERSE_ROOT": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert not cluster_ssh_install(config)
    assert not (tmp_path / "root" / ".ssh").exists()
