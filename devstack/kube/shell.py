"""The simulated shell behind the Kubernetes API emulator's exec (a development stand-in: nothing
runs in an emulated container). It answers a handful of commands the way a container of the
platform would, so the web terminal can be tested end to end: ``echo``, ``ls`` (the read-only
public pool under ``/public``, the instance disk at ``/root/data``; on the pod's volumes, the
files they really hold, which ``cat`` reads), ``nvidia-smi`` (the pod's GPUs as the emulated node
has them), ``stty size`` (the terminal size, after resizes), ``pwd``, ``cd``, ``cat``,
``whoami``, ``hostname``, ``clear``, ``exit``, ``touch`` (a file on the pod's volumes: a
multi-node job's gate), ``mkdir`` (a no-op) and ``starverse-preflight`` (a cluster's
pre-flight check, its result simulated from the topology: :func:`preflight_result`); anything
else is "command not found". ``a && b`` runs b when a succeeded, and ``echo … > /path`` writes
the file in the container (which ``cat`` then reads). A program is found as a shell finds it:
a name with a slash is that
file, a bare name the first one on ``PATH``; and a program the tenant replaced or added in the
container (:class:`ReplacedProgram`, root as the tenant is) is what runs at its path.

With a TTY it behaves like a terminal's line discipline: typed characters are echoed (wide CJK
characters count two columns when erased), Backspace erases, Enter runs the line, Ctrl-C drops
it, Ctrl-D on an empty line exits, and output lines end in CR LF. Input is UTF-8, decoded
incrementally, so a character split across two frames arrives whole."""

from __future__ import annotations

import codecs
import datetime as dt
import json
import shlex
import sys
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeagent.sim import (
    HGX_BUSES,
    gpu_digest,
    gpu_limit,
    gpu_uuid,
    product_name,
    profile_for,
    running_order,
)

# What the platform's public pool holds (the seeded catalogue's directories), as the emulated
# containers see it: the emulator mounts nothing.
PUBLIC_POOL = {
    "data": ["BELLE", "CLUECorpusSmall", "COIG", "ImageNet-1k", "alpaca-gpt4-zh", "c4-en"],
    "models": [
        "Baichuan2-7B-Chat",
        "Meta-Llama-3-8B-Instruct",
        "Qwen2-7B-Instruct",
        "bge-large-zh-v1.5",
        "chatglm3-6b",
    ],
}
FILES = {
    "/": ["bin", "dev", "etc", "home", "proc", "public", "root", "sys", "tmp", "usr", "var"],
    "/root": ["data"],
    "/root/data": [],
    "/public": sorted(PUBLIC_POOL),
    **{f"/public/{kind}": names for kind, names in PUBLIC_POOL.items()},
}
SHELLS = ("sh", "bash", "ash", "dash", "zsh")
DRIVER, CUDA = "550.54.15", "12.4"


@dataclass(frozen=True)
class Gpu:
    index: int  # on the node
    name: str
    uuid: str
    bus_id: str
    memory_mb: int
    power_limit_w: int


@dataclass(frozen=True)
class Peer:
    """A rank of the pod's cluster (pods with its ``starverse.io/cluster`` label), as the
    pre-flight simulation sees it: its host name, node, leaf switch, GPUs and whether its node
    has an injected bad link."""

    rank: int
    host: str
    node: str
    switch: str
    product: str
    gpus: int
    bad_link: bool = False


@dataclass(frozen=True)
class ReplacedProgram:
    """A file the tenant (root in its container) wrote at a path of the container's writable
    layer: running it prints ``prints`` and exits with ``exit_code``, or, ``hangs``, never ends
    (the exec session lasts until its client goes away)."""

    prints: str = ""
    exit_code: int = 0
    hangs: bool = False


@dataclass(frozen=True)
class Container:
    """What the shell knows of the container it pretends to run in."""

    pod: str
    node: str
    gpus: list[Gpu] = field(default_factory=list)
    driver: str = DRIVER
    cuda: str = CUDA
    peers: tuple[Peer, ...] = ()
    replaced: dict[str, ReplacedProgram] = field(default_factory=dict)  # by absolute path
    # the host path behind a container path on one of the pod's volumes (:mod:`.volumedata`)
    volume_path: Callable[[str], Path | None] | None = None
    # files written by exec in the container's writable layer (``echo … > /path``), by path:
    # the pod's own dict, kept by the emulator for the pod's life (KubeEmulator.container_file)
    written: dict[str, str] = field(default_factory=dict)


# The images' PATH (Docker's default), and where their programs are installed (the platform's
# init links starverse-preflight into /opt/starverse/bin and /usr/local/bin: install.sh).
PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
INSTALLED = {
    "/opt/starverse/bin/starverse-preflight": "starverse-preflight",
    "/opt/starverse/init/bin/starverse-preflight": "starverse-preflight",
    "/usr/local/bin/starverse-preflight": "starverse-preflight",
    "/usr/bin/nvidia-smi": "nvidia-smi",
}


# A cluster node's label or annotation that injects a bad link into the simulated pre-flight
# (kubectl label node gpu-h100-1 emulator.starverse.io/bad-link=true).
BAD_LINK = "emulator.starverse.io/bad-link"
CLUSTER_LABEL, RANK_LABEL = "starverse.io/cluster", "starverse.io/rank"
SWITCH_LABEL = "topology.starverse.io/switch"
# Simulated all-reduce bus bandwidth (GB/s, as nccl-tests prints busbw) between nodes under
# one leaf switch, by GPU: 8×400G InfiniBand H100 nodes reach ~350-390, A100 (8×200G) ~180.
BUSBW_GBPS = {"H100": 370.0, "H200": 375.0, "A100": 185.0}
OTHER_BUSBW_GBPS = 40.0
ACROSS_SPINE = 0.88  # across leaf switches, through the spine
BAD_LINK_FACTOR = 0.12  # a node with a flapping or degraded link
PREFLIGHT_SIZE_BYTES = 4_000_000_000


def peers_of(pod: dict[str, Any], pods: list[dict[str, Any]], nodes: dict[str, Any]) -> list[Peer]:
    """The ranks of the pod's cluster: pods of its namespace with its cluster label, each with
    its node's switch label and bad-link mark."""
    labels = pod["metadata"].get("labels") or {}
    cluster = labels.get(CLUSTER_LABEL)
    if not cluster:
        return []
    namespace = pod["metadata"].get("namespace")
    peers = []
    for other in pods:
        meta = other["metadata"]
        if (
            meta.get("namespace") != namespace
            or (meta.get("labels") or {}).get(CLUSTER_LABEL) != cluster
        ):
            continue
        node_name = str((other.get("spec") or {}).get("nodeName") or "")
        node_meta = (nodes.get(node_name) or {}).get("metadata") or {}
        node_labels = node_meta.get("labels") or {}
        marks = (node_labels.get(BAD_LINK), (node_meta.get("annotations") or {}).get(BAD_LINK))
        rank = str((meta.get("labels") or {}).get(RANK_LABEL, "0"))
        peers.append(
            Peer(
                rank=int(rank) if rank.isdigit() else 0,
                host=f"{cluster}-{rank}.{cluster}",
                node=node_name,
                switch=str(node_labels.get(SWITCH_LABEL, "")),
                product=product_name(str(node_labels.get("nvidia.com/gpu.product", ""))),
                gpus=gpu_limit(other),
                bad_link="true" in marks,
            )
        )
    return sorted(peers, key=lambda peer: peer.rank)


def _node_gbps(peer: Peer) -> float:
    base = next((v for k, v in BUSBW_GBPS.items() if k in peer.product), OTHER_BUSBW_GBPS)
    return base * (BAD_LINK_FACTOR if peer.bad_link else 1.0)


def _image_preflight() -> Any:
    """The images' own pre-flight module (deploy/images/init), so the simulation pairs nodes
    and words its result as the real check does."""
    try:
        from starverse_init import preflight
    except ImportError:  # the emulator started outside the test runner's path
        sys.path.append(str(Path(__file__).resolve().parents[2] / "deploy" / "images" / "init"))
        from starverse_init import preflight
    return preflight


def preflight_result(peers: list[Peer]) -> dict[str, Any]:
    """What ``starverse-preflight --json`` prints for these ranks, simulated from the topology:
    a pair under one switch runs at its GPUs' rate, one across switches slower (the spine), and
    a pair with a bad-link node at that node's crippled rate; the whole cluster at its slowest
    node's rate, slower again when it spans switches."""
    image = _image_preflight()

    def pair_gbps(a: Peer, b: Peer) -> float:
        spine = ACROSS_SPINE if a.switch != b.switch else 1.0
        return min(_node_gbps(a), _node_gbps(b)) * spine

    spans = len({peer.switch for peer in peers}) > 1
    overall = min(_node_gbps(peer) for peer in peers) * (ACROSS_SPINE if spans else 1.0) * 0.98
    pairs = [
        (number, (a, b), pair_gbps(peers[a], peers[b]))
        for number, matching in enumerate(image.pair_rounds(len(peers)), start=1)
        for a, b in matching
    ]
    return image.summary(
        overall_gbps=overall,
        size_bytes=PREFLIGHT_SIZE_BYTES,
        hosts=[peer.host for peer in peers],
        gpus_per_node=peers[0].gpus,
        pairs=pairs,
    )


def container_for(pod: dict[str, Any], node: dict[str, Any] | None, pods: list[Any]) -> Container:
    """The pod's GPUs as the simulated node agent sees them: the node's GPUs are handed out in
    order of its Running pods' ``nvidia.com/gpu`` limits, oldest pod first."""
    name = pod["metadata"]["name"]
    node_name = str((pod.get("spec") or {}).get("nodeName") or "")
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    product = product_name(str(labels.get("nvidia.com/gpu.product", "")))
    profile = profile_for(product)
    memory = int(labels.get("nvidia.com/gpu.memory") or profile.memory_mb)
    offset = 0
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    for other in sorted(running, key=running_order):
        if other["metadata"].get("uid") == pod["metadata"].get("uid"):
            break
        offset += gpu_limit(other)
    gpus = []
    for index in range(offset, offset + gpu_limit(pod)):
        uuid = gpu_uuid(gpu_digest(node_name, index))
        bus = HGX_BUSES[index % len(HGX_BUSES)]
        gpus.append(
            Gpu(
                index, product, uuid, f"00000000:{bus:02X}:00.0", memory, int(profile.power_limit_w)
            )
        )
    return Container(name, node_name, gpus)


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


class SimulatedShell:
    """One shell session: ``feed`` it the client's stdin bytes; what it prints goes to
    ``write``; ``exit_code`` is set once it has exited."""

    def __init__(
        self,
        container: Container,
        write: Callable[[bytes], None],
        *,
        tty: bool,
        clock: Callable[[], dt.datetime] = dt.datetime.now,
    ) -> None:
        self.container = container
        self._write = write
        self._captured: list[str] | None = None  # what a command prints into a `> path`
        self.tty = tty
        self.clock = clock
        self.cols, self.rows = 80, 24
        self.cwd = "/root"
        self.exit_code: int | None = None
        self.hung = False  # a program that never ends is running
        self._line = ""
        self._escape = ""  # an escape sequence being skipped (arrow keys and the like)
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    # --- output ------------------------------------------------------------------------------

    def print(self, text: str) -> None:
        if self._captured is not None:  # a command's `> path`: into the file
            self._captured.append(text)
            return
        if self.tty:
            text = text.replace("\r\n", "\n").replace("\n", "\r\n")
        self._write(text.encode())

    def prompt(self) -> None:
        where = "~" if self.cwd == "/root" else self.cwd
        self.print(f"root@{self.container.pod}:{where}# " if self.tty else "")

    # --- input -------------------------------------------------------------------------------

    def start(self) -> None:
        self.prompt()

    def resize(self, cols: int, rows: int) -> None:
        if cols > 0 and rows > 0:
            self.cols, self.rows = cols, rows

    def feed(self, data: bytes) -> None:
        for char in self._decoder.decode(data):
            if self.exit_code is not None:
                return
            if self.tty:
                self._key(char)
            elif char == "\n":
                self.run(self._line)
                self._line = ""
            else:
                self._line += char

    def end_of_input(self) -> None:
        """The client closed stdin: what is left runs, then the shell exits."""
        if self.exit_code is None and self._line and not self.tty:
            self.run(self._line)
        if self.exit_code is None:
            self.exit_code = 0

    def _key(self, char: str) -> None:
        if self._escape:
            self._escape += char
            if len(self._escape) > 1 and (char.isalpha() or char == "~" or len(self._escape) > 8):
                self._escape = ""
            return
        if char == "\x1b":
            self._escape = char
        elif char in ("\r", "\n"):
            self.print("\n")
            line, self._line = self._line, ""
            self.run(line)
            if self.exit_code is None:
                self.prompt()
        elif char in ("\x7f", "\b"):
            if self._line:
                width = _width(self._line[-1])
                self._line = self._line[:-1]
                self._write(("\b" * width + " " * width + "\b" * width).encode())
        elif char == "\x03":
            self._line = ""
            self.print("^C\n")
            self.prompt()
        elif char == "\x04":
            if not self._line:
                self.print("exit\n")
                self.exit_code = 0
        elif char >= " " or char == "\t":
            self._line += char
            self._write(char.encode())

    # --- commands ----------------------------------------------------------------------------

    def run(self, line: str) -> int:
        """Run one command line; its status (0 fine, 1 usage, 2 missing file, 127 not found).
        Commands joined by ``&&`` run while each succeeds; a command's ``> path`` writes what
        it prints to that file of the container instead (``Container.written``)."""
        if " && " in line:
            code = 0
            for part in line.split(" && "):
                code = self.run(part)
                if code != 0:
                    return code
            return code
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            words = []
        if ">" in words[:-1]:
            at = words.index(">")
            return self._redirected(shlex.join(words[:at]), self._path(words[at + 1]))
        return self._run_one(line)

    def _redirected(self, line: str, path: str) -> int:
        """Run `line` with what it prints written to the container file `path`."""
        self._captured = []
        try:
            code = self._run_one(line)
            self.container.written[path] = "".join(self._captured)
        finally:
            self._captured = None
        return code

    def _run_one(self, line: str) -> int:
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            self.print("bash: syntax error: unexpected end of file\n")
            return 2
        if not words:
            return 0
        name, args = words[0], words[1:]
        path = self._which(name)
        replaced = self.container.replaced.get(path or "")
        if replaced is not None:
            return self._replaced(replaced)
        if path is not None:
            name = INSTALLED[path]
        elif "/" in name:
            self.print(f"bash: {name}: No such file or directory\n")
            return 127
        command = {
            "echo": self._echo,
            "cat": self._cat,
            "ls": self._ls,
            "cd": self._cd,
            "pwd": lambda a: self._say(self.cwd),
            "whoami": lambda a: self._say("root"),
            "hostname": lambda a: self._say(self.container.pod),
            "nvidia-smi": self._nvidia_smi,
            "stty": self._stty,
            "clear": lambda a: self._raw("\x1b[H\x1b[2J"),
            "exit": self._exit,
            "true": lambda a: 0,
            "touch": self._touch,
            "mkdir": lambda a: 0,  # directories of the writable layer need no making here
            "starverse-preflight": self._preflight,
        }.get(name)
        if command is None:
            self.print(f"bash: {name}: command not found\n")
            return 127
        return command(args)

    def _which(self, name: str) -> str | None:
        """The path of the program a command word runs, as a shell finds it: the word itself
        when it has a slash, else the first directory of PATH holding it; None for a word
        that names no installed or replaced program (a builtin, or nothing)."""
        known = set(INSTALLED) | set(self.container.replaced)
        if "/" in name:
            return name if name in known else None
        return next((f"{d}/{name}" for d in PATH if f"{d}/{name}" in known), None)

    def _replaced(self, program: ReplacedProgram) -> int:
        if program.hangs:
            self.hung = True
            return 0
        self.print(program.prints)
        return program.exit_code

    def _say(self, text: str) -> int:
        self.print(text + "\n")
        return 0

    def _raw(self, text: str) -> int:
        self._write(text.encode())
        return 0

    def _echo(self, args: list[str]) -> int:
        newline = not (args and args[0] == "-n")
        text = " ".join(args[1:] if not newline else args)
        self.print(text + ("\n" if newline else ""))
        return 0

    def _path(self, arg: str) -> str:
        if arg in ("", "~"):
            return "/root"
        path = arg if arg.startswith("/") else f"{self.cwd.rstrip('/')}/{arg}"
        parts: list[str] = []
        for part in path.split("/"):
            if part == "..":
                parts = parts[:-1]
            elif part not in ("", "."):
                parts.append(part)
        return "/" + "/".join(parts)

    def _on_volume(self, path: str) -> Path | None:
        """The real file or directory behind ``path`` when it is on one of the pod's volumes
        and exists (the emulated volumes keep files: :mod:`.volumedata`)."""
        resolve = self.container.volume_path
        host = resolve(path) if resolve is not None else None
        return host if host is not None and host.exists() else None

    def _listing(self, path: str) -> list[str] | None:
        host = self._on_volume(path)
        if host is None:
            return FILES.get(path)
        return sorted(p.name for p in host.iterdir()) if host.is_dir() else [host.name]

    def _cat(self, args: list[str]) -> int:
        status = 0
        for arg in args:
            if (text := self.container.written.get(self._path(arg))) is not None:
                self.print(text)
                continue
            host = self._on_volume(self._path(arg))
            if host is None or host.is_dir():
                reason = "Is a directory" if host is not None else "No such file or directory"
                self.print(f"cat: {arg}: {reason}\n")
                status = 1
                continue
            self.print(host.read_text(errors="replace"))
        return status

    def _touch(self, args: list[str]) -> int:
        """Create (or leave) each file: only on the pod's volumes, the one place an emulated
        container keeps files (a multi-node job's gate: clusters.gates)."""
        status = 0
        for arg in (a for a in args if not a.startswith("-")):
            path = self._path(arg)
            resolve = self.container.volume_path
            host = resolve(path) if resolve is not None else None
            if host is None or not host.parent.is_dir():
                self.print(f"touch: cannot touch '{arg}': No such file or directory\n")
                status = 1
                continue
            host.touch()
        return status

    def _ls(self, args: list[str]) -> int:
        paths = [a for a in args if not a.startswith("-")] or [self.cwd]
        status = 0
        for index, arg in enumerate(paths):
            names = self._listing(self._path(arg))
            if names is None:
                self.print(f"ls: cannot access '{arg}': No such file or directory\n")
                status = 2
                continue
            if len(paths) > 1:
                self.print(("\n" if index else "") + f"{arg}:\n")
            if names:
                self.print("  ".join(sorted(names, key=str.lower)) + "\n")
        return status

    def _cd(self, args: list[str]) -> int:
        path = self._path(args[0] if args else "")
        host = self._on_volume(path)
        if (host is None and path not in FILES) or (host is not None and not host.is_dir()):
            self.print(f"bash: cd: {args[0]}: No such file or directory\n")
            return 1
        self.cwd = path
        return 0

    def _stty(self, args: list[str]) -> int:
        if args == ["size"]:
            return self._say(f"{self.rows} {self.cols}")
        return 0

    def _exit(self, args: list[str]) -> int:
        try:
            self.exit_code = int(args[0]) % 256 if args else 0
        except ValueError:
            self.exit_code = 2
        return self.exit_code

    def _preflight(self, args: list[str]) -> int:
        peers = list(self.container.peers)
        if len(peers) < 2:
            self.print("starverse-preflight: the hostfile lists fewer than two nodes\n")
            return 2
        result = preflight_result(peers)
        if "--json" in args:
            return self._say(json.dumps(result))
        self.print(f"all-reduce busbw {result['busbw_gbps']} GB/s\n")
        for pair in result["pairs"]:
            hosts = " ".join(pair["hosts"])
            self.print(f"round {pair['round']} {hosts}: {pair['busbw_gbps']} GB/s\n")
        return 0

    def _nvidia_smi(self, args: list[str]) -> int:
        gpus = self.container.gpus
        if not gpus:
            self.print(
                "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                "Make sure that the latest NVIDIA driver is installed and running.\n"
            )
            return 9
        if args == ["-L"]:
            for number, gpu in enumerate(gpus):
                self.print(f"GPU {number}: {gpu.name} (UUID: {gpu.uuid})\n")
            return 0
        self.print(nvidia_smi_table(self.container, self.clock()))
        return 0


def nvidia_smi_table(container: Container, now: dt.datetime) -> str:
    """``nvidia-smi``'s summary of the container's GPUs, numbered from 0 as inside a container,
    idle."""
    rule = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"

    def row(left: str, middle: str, right: str) -> str:
        return f"|{left:<41}|{middle:>24}|{right:>22}|"

    lines = [
        now.strftime("%a %b %d %H:%M:%S %Y"),
        "+" + "-" * 89 + "+",
        f"| NVIDIA-SMI {container.driver:<22}Driver Version: {container.driver:<15}"
        f"CUDA Version: {container.cuda:<10}|",
        rule.replace("+", "|", 1)[:-1] + "+",
        row(
            " GPU  Name                 Persistence-M ",
            " Bus-Id          Disp.A ",
            " Volatile Uncorr. ECC ",
        ),
        row(
            " Fan  Temp   Perf          Pwr:Usage/Cap ",
            "           Memory-Usage ",
            " GPU-Util  Compute M. ",
        ),
        row("", "", "               MIG M. "),
        "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|",
    ]
    for number, gpu in enumerate(container.gpus):
        name = gpu.name[:24]
        lines += [
            row(f" {number:>3}  {name:<24}       On ", f" {gpu.bus_id} Off ", "0 "),
            row(
                f" N/A   32C    P0{f'70W / {gpu.power_limit_w:>4}W':>24} ",
                f"{0:>8}MiB / {gpu.memory_mb:>6}MiB ",
                f"{0:>6}%      Default ",
            ),
            row("", "", "Disabled "),
            rule,
        ]
    lines += [
        "",
        "+" + "-" * 89 + "+",
        f"| {'Processes:':<88}|",
        f"|  {'GPU   GI   CI        PID   Type   Process name':<76}{'GPU Memory':<11}|",
        f"|  {'      ID   ID':<76}{'Usage':<11}|",
        "|" + "=" * 89 + "|",
        f"|  {'No running processes found':<87}|",
        "+" + "-" * 89 + "+",
    ]
    return "\n".join(lines) + "\n"
