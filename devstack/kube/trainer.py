"""The simulated trainer the Kubernetes API emulator's kubelets run (a development stand-in for
a training job's program: nothing is executed, the kubelet plays it on its clock).

A container whose command (``command`` + ``args``; also inside ``bash -c "..."`` / ``sh -lc``)
invokes ``starverse-sim-train --steps N --step-seconds S [--fail-at K] [--exit-code C]
[--checkpoint-dir D]`` runs it: ``D`` defaults to the container's ``STARVERSE_CHECKPOINT_DIR``
(no checkpoints without either); at start it reads ``<D>/step`` and logs ``resumed from step M``
or ``starting at step 0``; every ``S`` seconds it logs ``step k/N loss=<x>`` (a deterministic,
decreasing loss) and writes ``k`` to ``<D>/step``; after step N it logs ``done`` and exits 0.
Reaching step K (``--fail-at``, when K is past the step it resumed from) it logs an error and
exits ``C`` (default 1) before doing that step, so a restart resumes from K-1 and fails again:
a bug in the user's code, not a lost node. ``$NAME`` / ``${NAME}`` in the command take the
container's ``env`` values, as a shell would expand them.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROGRAM = "starverse-sim-train"
# The image's init waits for the file this variable names before starting its program (a
# multi-node job's rank: the worker writes it through pods/exec once the pre-flight passed).
GATE_ENV = "STARVERSE_GATE"
_OPERATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", ";;"})
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
USAGE_EXIT = 2  # what argparse exits with on a bad command line


@dataclass(frozen=True)
class TrainerArgs:
    steps: int
    step_seconds: float
    fail_at: int | None = None
    exit_code: int = 1
    checkpoint_dir: str | None = None


@dataclass(frozen=True)
class BadArgs:
    """A command line the trainer refuses (it exits ``USAGE_EXIT`` with this message)."""

    message: str


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's literal ``env`` values (``valueFrom`` is not resolved)."""
    return {
        str(e["name"]): str(e.get("value", ""))
        for e in container.get("env") or []
        if isinstance(e, dict) and e.get("name") and "valueFrom" not in e
    }


def trainer_args(container: dict[str, Any]) -> TrainerArgs | BadArgs | None:
    """The trainer's arguments when the container's command runs it, else None."""
    env = container_env(container)
    words: list[str] = []
    for part in [*(container.get("command") or []), *(container.get("args") or [])]:
        text = _VARIABLE.sub(lambda m: env.get(m.group(1) or m.group(2), ""), str(part))
        if PROGRAM not in text:
            words.append(text)
            continue
        try:
            lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            words.extend(lexer)
        except ValueError:
            words.append(text)
    for index, word in enumerate(words):
        if word.rsplit("/", 1)[-1] == PROGRAM:
            flags: list[str] = []
            for following in words[index + 1 :]:
                if following in _OPERATORS:
                    break
                flags.append(following)
            return _parse(flags, env)
    return None


def _parse(flags: list[str], env: dict[str, str]) -> TrainerArgs | BadArgs:
    values: dict[str, str] = {}
    pending = list(flags)
    while pending:
        flag = pending.pop(0)
        name, equals, value = flag.partition("=")
        if name not in (
            "--steps",
            "--step-seconds",
            "--fail-at",
            "--exit-code",
            "--checkpoint-dir",
        ):
            return BadArgs(f"{PROGRAM}: error: unrecognized arguments: {flag}")
        if not equals:
            if not pending:
                return BadArgs(f"{PROGRAM}: error: argument {name}: expected one argument")
            value = pending.pop(0)
        values[name] = value
    if "--steps" not in values or "--step-seconds" not in values:
        return BadArgs(
            f"{PROGRAM}: error: the following arguments are required: --steps, --step-seconds"
        )
    try:
        steps = int(values["--steps"])
        step_seconds = float(values["--step-seconds"])
        fail_at = int(values["--fail-at"]) if "--fail-at" in values else None
        exit_code = int(values.get("--exit-code", "1"))
    except ValueError as exc:
        return BadArgs(f"{PROGRAM}: error: {exc}")
    if steps < 0 or step_seconds <= 0:
        return BadArgs(f"{PROGRAM}: error: --steps must be >= 0 and --step-seconds > 0")
    return TrainerArgs(
        steps,
        step_seconds,
        fail_at,
        exit_code,
        values.get("--checkpoint-dir") or env.get("STARVERSE_CHECKPOINT_DIR") or None,
    )


def loss_at(step: int) -> float:
    """The loss the trainer logs at ``step``: deterministic and decreasing."""
    return round(0.1 + 2.4 * 0.95**step, 4)


@dataclass
class TrainerRun:
    """One run of the trainer in one container instance. ``checkpoint`` is the host path of
    ``<D>/step`` (None: no checkpoint directory, or not on a volume) and ``read_only`` whether
    the volume is mounted read-only."""

    args: TrainerArgs
    step: int  # the last step done (or resumed from)
    resumed: int
    next_due: float
    checkpoint: Path | None
    read_only: bool = False
    exit_code: int | None = None  # set once it has exited

    @classmethod
    def exited(cls, code: int, now: float) -> TrainerRun:
        """A run that never got going (a refused command line): it exits ``code`` at once."""
        return cls(TrainerArgs(0, 1.0), 0, 0, now, None, exit_code=code)

    def advance(self, now: float) -> list[str]:
        """The lines the run writes up to ``now`` (it may exit on the way: ``exit_code``)."""
        lines: list[str] = []
        while self.exit_code is None and now >= self.next_due:
            upcoming = self.step + 1
            if upcoming > self.args.steps:
                lines.append("done")
                self.exit_code = 0
                break
            fail_at = self.args.fail_at
            if fail_at is not None and upcoming == fail_at and fail_at > self.resumed:
                lines.append(
                    f"error: simulated failure at step {upcoming}/{self.args.steps} "
                    f"(exit code {self.args.exit_code})"
                )
                self.exit_code = self.args.exit_code
                break
            lines.append(f"step {upcoming}/{self.args.steps} loss={loss_at(upcoming):.4f}")
            problem = self._save(upcoming)
            if problem:
                lines.append(problem)
                self.exit_code = 1
                break
            self.step = upcoming
            self.next_due += self.args.step_seconds
        return lines

    def _save(self, step: int) -> str:
        if self.checkpoint is None:
            return ""
        target = f"{self.args.checkpoint_dir}/step"
        if self.read_only:
            return f"error: cannot write {target}: Read-only file system"
        try:
            self.checkpoint.parent.mkdir(parents=True, exist_ok=True)
            self.checkpoint.write_text(f"{step}\n")
        except OSError as exc:
            return f"error: cannot write {target}: {exc.strerror}"
        return ""


def start_run(
    args: TrainerArgs, env: dict[str, str], checkpoint: Path | None, read_only: bool, now: float
) -> tuple[TrainerRun, list[str]]:
    """A run starting at ``now``, and the lines it writes at start."""
    lines: list[str] = []
    for name in ("STARVERSE_RESTART_COUNT", "RANK", "NODE_RANK"):
        if name in env:
            lines.append(f"{name}={env[name]}")
    resumed = 0
    if checkpoint is not None:
        try:
            resumed = max(int(checkpoint.read_text().strip() or 0), 0)
        except (OSError, ValueError):
            resumed = 0
    if resumed:
        lines.append(f"resumed from step {resumed}")
    else:
        lines.append("starting at step 0")
    run = TrainerRun(args, resumed, resumed, now + args.step_seconds, checkpoint, read_only)
    return run, lines
