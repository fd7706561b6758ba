"""The CLI's host-key pinning, its completion scripts, and the package itself: standard library
only, no Django or platform import, and a wheel with the `starverse` command."""

import ast
import io
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from starverse.core.hostkeys import host_key_generate
from starverse_cli import completion
from starverse_cli.main import build_parser, main
from starverse_cli.sshpin import HostKeyError, fingerprint, host_name, pin, ssh_argv

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "cli" / "starverse_cli"


def _parts(public_openssh: str) -> tuple[str, str]:
    kind, key = public_openssh.split()[:2]
    return kind, key


# ---------------------------------------------------------------- host keys


def test_fingerprints_are_the_platforms_and_ssh_keygens():
    key = host_key_generate()
    assert fingerprint(_parts(key.public_openssh)[1]) == key.fingerprint


def test_known_hosts_names_ports_as_openssh_does():
    assert host_name("gw.example", 22) == "gw.example"
    assert host_name("127.0.0.1", 31022) == "[127.0.0.1]:31022"


def test_the_served_key_is_pinned_only_if_it_is_the_instances(tmp_path):
    mine, other = host_key_generate(), host_key_generate()
    known_hosts = tmp_path / "known_hosts"
    scans: list[tuple[str, int]] = []

    def serving(*keys):
        def scan(host: str, port: int) -> list[tuple[str, str]]:
            scans.append((host, port))
            return [_parts(key.public_openssh) for key in keys]

        return scan

    # an impostor's key: refused, nothing written
    with pytest.raises(HostKeyError, match="not the instance's"):
        pin(known_hosts, "127.0.0.1", 31022, mine.fingerprint, serving(other))
    assert not known_hosts.exists()

    # among several keys served, the one with the API's fingerprint is pinned (0600)
    entry = pin(known_hosts, "127.0.0.1", 31022, mine.fingerprint, serving(other, mine))
    assert entry == f"[127.0.0.1]:31022 {mine.public_openssh}"
    assert known_hosts.read_text() == entry + "\n"
    assert known_hosts.stat().st_mode & 0o777 == 0o600

    # pinned already: no scan
    scans.clear()
    assert pin(known_hosts, "127.0.0.1", 31022, mine.fingerprint, serving()) == entry
    assert scans == []

    # the port now belongs to another instance: its key replaces the stale entry, others stay
    known_hosts.write_text(f"gw.example {other.public_openssh}\n{entry}\n")
    newer = host_key_generate()
    pin(known_hosts, "127.0.0.1", 31022, newer.fingerprint, serving(newer))
    assert known_hosts.read_text().splitlines() == [
        f"gw.example {other.public_openssh}",
        f"[127.0.0.1]:31022 {newer.public_openssh}",
    ]


def test_ssh_runs_with_the_pinned_file_only_and_strict_checking(tmp_path):
    argv = ssh_argv(
        host="gw.example",
        port=31022,
        user="root",
        known_hosts=tmp_path / "known_hosts",
        identity="/keys/laptop",
        options=["ServerAliveInterval=30"],
        command=["ls", "-la"],
    )
    assert argv == [
        "ssh",
        "-p",
        "31022",
        "-o",
        f"UserKnownHostsFile={tmp_path / 'known_hosts'}",
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "UpdateHostKeys=no",
        "-i",
        "/keys/laptop",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "ServerAliveInterval=30",
        "--",
        "root@gw.example",
        "ls",
        "-la",
    ]


def test_ssh_prints_the_command_with_the_pinned_key_and_the_remote_command(
    cli_env, fake_api, monkeypatch
):
    key = host_key_generate()
    ssh = {
        "host": "127.0.0.1",
        "port": 31022,
        "user": "root",
        "host_key_fingerprint": key.fingerprint,
    }
    fake_api.on(
        "GET", "/api/v1/instances/ins_abc", body={"id": "ins_abc", "status": "running", "ssh": ssh}
    )
    monkeypatch.setenv("STARVERSE_API_URL", fake_api.url)
    monkeypatch.setenv("STARVERSE_TOKEN", "sv_test")
    cli_env.mkdir(parents=True)
    (cli_env / "known_hosts").write_text(f"[127.0.0.1]:31022 {key.public_openssh}\n")
    out = io.StringIO()
    argv = ["ssh", "ins_abc", "-i", "/k", "--print-command", "--json", "--", "ls", "-la"]
    assert main(argv, out=out, err=io.StringIO()) == 0
    printed = json.loads(out.getvalue())
    assert printed[-4:] == ["--", "root@127.0.0.1", "ls", "-la"]
    assert f"UserKnownHostsFile={cli_env / 'known_hosts'}" in printed
    assert printed[printed.index("-i") + 1] == "/k"

    # a pinned key of another instance on that port, and nothing serving: refused, exit 1
    (cli_env / "known_hosts").write_text(
        f"[127.0.0.1]:31022 {host_key_generate().public_openssh}\n"
    )
    monkeypatch.setenv("STARVERSE_SSH_KEYSCAN", "false")  # a "scanner" that finds nothing
    err = io.StringIO()
    assert main(["ssh", "ins_abc", "--print-command"], out=io.StringIO(), err=err) == 1
    assert "cannot read the host key of 127.0.0.1:31022" in err.getvalue()


# ---------------------------------------------------------------- completion


def test_completion_scripts_name_every_command_and_are_valid_bash():
    parser = build_parser()
    bash = completion.script(parser, "bash")
    subprocess.run(["bash", "-n"], input=bash, text=True, check=True)
    nodes = completion.walk(parser)
    commands = {node.path for node in nodes if node.path}
    assert {"set", "disks resize", "rent", "ssh", "clusters create", "topup", "balance"} <= commands
    # every command and sub-command completes at its level, with its options
    probe = bash
    for node in nodes:
        words = node.path.split()
        probe += f'COMP_WORDS=(starverse {" ".join(words)} ""); COMP_CWORD={len(words) + 1}; '
        probe += '_starverse; echo "${COMPREPLY[*]}"\n'
    probe += (
        'COMP_WORDS=(starverse rent off_1 --im); COMP_CWORD=3; _starverse; echo "${COMPREPLY[*]}"\n'
        'COMP_WORDS=(starverse set ins_1 --no); COMP_CWORD=3; _starverse; echo "${COMPREPLY[*]}"\n'
    )
    lines = subprocess.run(
        ["bash"], input=probe, text=True, capture_output=True, check=True
    ).stdout.splitlines()
    for node, line in zip(nodes, lines, strict=False):
        assert set(node.commands) | set(node.options) <= set(line.split()), node.path
    offered = dict(zip((node.path for node in nodes), lines, strict=False))
    top = set(offered[""].split())
    assert {name for name in commands if " " not in name} <= top
    assert offered["disks"].split()[:6] == ["ls", "create", "resize", "rm", "attach", "detach"]
    assert {"--stop-after", "--idle-stop", "--no-idle-stop"} <= set(offered["rent"].split())
    assert {"bash", "zsh", "fish"} <= set(offered["completion"].split())
    assert lines[-2] == "--image"
    assert set(lines[-1].split()) == {"--no-stop-at", "--no-idle-stop"}
    zsh = completion.script(parser, "zsh")
    assert zsh.startswith("#compdef starverse\n") and "bashcompinit" in zsh
    fish = completion.script(parser, "fish")
    assert "complete -c starverse -n '__fish_use_subcommand' -a rent" in fish
    assert "__fish_seen_subcommand_from disks; and not __fish_seen_subcommand_from ls" in fish


# ---------------------------------------------------------------- the package


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_cli_imports_only_the_standard_library_and_itself():
    modules = sorted(PACKAGE.glob("*.py"))
    assert len(modules) >= 7
    for module in modules:
        foreign = _imports(module) - set(sys.stdlib_module_names) - {"starverse_cli"}
        if module.name == "mcp_server.py":  # `starverse mcp`: the optional [mcp] extra
            foreign -= {"mcp"}
        assert not foreign, f"{module.name} imports {foreign}: the CLI is standard library only"


def test_running_the_cli_loads_no_django_and_no_platform_code():
    # nor the MCP SDK: only `starverse mcp` imports it (starverse_cli.mcp_server)
    platform = "django rest_framework celery starverse billing instances fleet storage clusters mcp"
    script = (
        "import sys, starverse_cli.main\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {platform.split()!r})\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={"PYTHONPATH": str(REPO / "cli"), "PATH": "/usr/bin:/bin"},
        cwd=PACKAGE.parent,  # not the repository root, whose packages would be importable
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_the_package_builds_with_the_starverse_command(tmp_path):
    """`pip install ./cli` builds it with setuptools; here the source distribution is built
    from a copy (offline, no wheel package needed) and its metadata read back."""
    source = tmp_path / "cli"
    shutil.copytree(REPO / "cli", source, ignore=shutil.ignore_patterns("__pycache__"))
    build = (
        "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", build, str(tmp_path / "dist")],
        cwd=source,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (sdist,) = (tmp_path / "dist").glob("*.tar.gz")
    # starverse-cli-0.1.0 or, from setuptools 69 on, starverse_cli-0.1.0
    assert sdist.name in ("starverse-cli-0.1.0.tar.gz", "starverse_cli-0.1.0.tar.gz")
    top = sdist.name.removesuffix(".tar.gz")
    with tarfile.open(sdist) as archive:
        names = set(archive.getnames())

        def read(member: str) -> str:
            extracted = archive.extractfile(f"{top}/{member}")
            assert extracted is not None, member
            return extracted.read().decode()

        entry_points = read("starverse_cli.egg-info/entry_points.txt")
        metadata = read("PKG-INFO")
    expected = {f"{top}/starverse_cli/{path.name}" for path in PACKAGE.glob("*.py")}
    assert expected <= names
    assert "[console_scripts]\nstarverse = starverse_cli.main:main" in entry_points
    assert "Requires-Python: >=3.10" in metadata
    assert "Name: starverse-cli" in metadata
    # no dependencies; the one extra is `starverse mcp`'s SDK
    assert "Requires-Dist" not in metadata.replace('Requires-Dist: mcp<3,>=2.3; extra == "mcp"', "")
    assert "Provides-Extra: mcp" in metadata
