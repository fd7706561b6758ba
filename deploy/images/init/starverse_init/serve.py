"""An engine image's entry point (`starverse-serve`, docs/images.md "Engine images"): check that
the endpoint's model folder holds a model, then replace this process with the engine's server.

The platform gives the engine's command line as the container's args (endpoints.engines
renders it from the endpoint's options), or, for an image run by hand, as
STARVERSE_ENGINE_COMMAND. A folder without `config.json` exits with MODEL_MISSING_EXIT and says
so in the termination log, which the kubelet copies into the pod's status: the platform reads
it there and fails the endpoint naming the field the user gave (`source.path`), instead of
letting the engine crash-loop on a path it cannot load."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Callable, Mapping, Sequence

from starverse_init.log import log

MODEL_MISSING_EXIT = 66  # EX_NOINPUT: the platform tells this apart from an engine's crash
USAGE_EXIT = 64
MODEL_DIR = "/model"
TERMINATION_LOG = "/dev/termination-log"


def model_problem(model_dir: Path, field: str) -> str | None:
    """What is wrong with the model folder, or None when it holds a checkpoint."""
    if not model_dir.is_dir():
        return f"{field}: no folder at {model_dir}"
    if not (model_dir / "config.json").is_file():
        return f"{field}: {model_dir} holds no config.json (not a model folder)"
    return None


def engine_argv(args: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """The engine's command: the container's args, else STARVERSE_ENGINE_COMMAND split as a
    shell would (never run by a shell)."""
    if args:
        return list(args)
    return shlex.split(env.get("STARVERSE_ENGINE_COMMAND", ""))


def _terminate_with(message: str, env: Mapping[str, str]) -> None:
    log("serve.model_missing", message=message)
    path = env.get("STARVERSE_TERMINATION_LOG", TERMINATION_LOG)
    try:
        with open(path, "w") as handle:
            handle.write(message)
    except OSError as error:  # not in a pod: the log line above is all there is
        log("serve.termination_log_unwritable", path=path, error=error)


def main(
    args: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    execvp: Callable[[str, list[str]], object] = os.execvp,
) -> int:
    args = sys.argv[1:] if args is None else args
    env = os.environ if env is None else env
    field = env.get("STARVERSE_SOURCE_FIELD") or "source.path"
    problem = model_problem(Path(env.get("STARVERSE_MODEL_DIR") or MODEL_DIR), field)
    if problem is not None:
        _terminate_with(problem, env)
        return MODEL_MISSING_EXIT
    argv = engine_argv(args, env)
    if not argv:
        log("serve.no_command", hint="give the engine's command as args")
        return USAGE_EXIT
    log("serve.exec", engine=env.get("STARVERSE_ENGINE", ""), command=shlex.join(argv))
    execvp(argv[0], argv)
    return 0  # only a test's execvp returns
