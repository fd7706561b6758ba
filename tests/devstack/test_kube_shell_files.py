"""The emulator's simulated shell writes files as a container's shell would (what a spot
instance's preemption notice needs: `mkdir -p … && echo <deadline> > /etc/starverse/preempt`):
`a && b` runs b only when a succeeded, `> path` puts what a command prints in the file, which
`cat` then reads, and nothing of it reaches the terminal."""

from devstack.kube.shell import Container, SimulatedShell


def _shell():
    out: list[bytes] = []
    return SimulatedShell(Container("pod-a", "node-0"), out.append, tty=False), out


def test_echo_into_a_file_and_cat_it_back():
    shell, out = _shell()
    code = shell.run(
        "mkdir -p /etc/starverse && echo 2026-12-03T12:40:30Z > /etc/starverse/preempt"
    )
    assert code == 0 and out == []
    assert shell.container.written == {"/etc/starverse/preempt": "2026-12-03T12:40:30Z\n"}
    assert shell.run("cat /etc/starverse/preempt") == 0
    assert b"".join(out) == b"2026-12-03T12:40:30Z\n"


def test_a_failed_command_stops_the_chain():
    shell, out = _shell()
    assert shell.run("no-such-program && echo hi > /tmp/x") == 127
    assert shell.container.written == {}
    assert b"command not found" in b"".join(out)
