"""The engine images' entry point (starverse_init.serve): the model folder checked before the
engine starts, naming the field the user filled, and the engine's command exec'd as given."""

import json
import os
import subprocess
import sys
from pathlib import Path

from starverse_init.serve import MODEL_MISSING_EXIT, USAGE_EXIT, engine_argv, main, model_problem

from endpoints.engines import engine_args

INIT = Path(__file__).resolve().parents[2] / "deploy" / "images" / "init"


def _model(root: Path) -> Path:
    folder = root / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return folder


def test_a_folder_with_config_json_is_a_model(tmp_path):
    assert model_problem(_model(tmp_path), "source.path") is None


def test_a_folder_without_config_json_names_the_field(tmp_path):
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.safetensors").write_bytes(b"\0")

    assert model_problem(tmp_path / "weights", "source.path") == (
        f"source.path: {tmp_path / 'weights'} holds no config.json (not a model folder)"
    )
    assert model_problem(tmp_path / "absent", "source.dataset") == (
        f"source.dataset: no folder at {tmp_path / 'absent'}"
    )


def test_the_engine_command_is_the_args_else_the_environment():
    assert engine_argv(["vllm", "serve", "/model"], {}) == ["vllm", "serve", "/model"]
    assert engine_argv(
        [], {"STARVERSE_ENGINE_COMMAND": "vllm serve /model --dtype 'bfloat16'"}
    ) == [
        "vllm",
        "serve",
        "/model",
        "--dtype",
        "bfloat16",
    ]
    assert engine_argv([], {}) == []


def test_main_execs_the_platforms_engine_command(tmp_path):
    execs: list[tuple[str, list[str]]] = []
    args = engine_args("vllm", {"dtype": "bfloat16", "tensor_parallel_size": 2}, "qwen")
    env = {"STARVERSE_MODEL_DIR": str(_model(tmp_path)), "STARVERSE_ENGINE": "vllm"}

    assert main(args, env, execvp=lambda file, argv: execs.append((file, argv))) == 0
    assert execs == [
        (
            "vllm",
            [
                "vllm",
                "serve",
                "/model",
                "--host",
                "0.0.0.0",  # noqa: S104 - the engine's flag, not a socket here
                "--port",
                "8000",
                "--served-model-name",
                "qwen",
                "--dtype",
                "bfloat16",
                "--tensor-parallel-size",
                "2",
            ],
        )
    ]


def test_main_refuses_a_missing_model_with_its_own_exit_code(tmp_path):
    execs: list[object] = []
    log = tmp_path / "termination-log"
    env = {
        "STARVERSE_MODEL_DIR": str(tmp_path / "nothing"),
        "STARVERSE_SOURCE_FIELD": "source.path",
        "STARVERSE_TERMINATION_LOG": str(log),
    }

    code = main(["vllm", "serve", "/model"], env, execvp=lambda *a: execs.append(a))

    assert code == MODEL_MISSING_EXIT == 66
    assert execs == []
    assert log.read_text() == f"source.path: no folder at {tmp_path / 'nothing'}"


def test_main_without_a_command_is_a_usage_error(tmp_path):
    env = {"STARVERSE_MODEL_DIR": str(_model(tmp_path))}
    assert main([], env, execvp=lambda *a: None) == USAGE_EXIT != MODEL_MISSING_EXIT


def _launch(tmp_path: Path, model_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The package as the launcher runs it (isolated python3), from the source tree."""
    code = (
        f"import sys; sys.path.insert(0, {str(INIT)!r}); "
        "from starverse_init.serve import main; sys.exit(main())"
    )
    env = {
        "PATH": os.environ["PATH"],
        "STARVERSE_MODEL_DIR": str(model_dir),
        "STARVERSE_TERMINATION_LOG": str(tmp_path / "termination-log"),
    }
    return subprocess.run(
        [sys.executable, "-I", "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_the_process_becomes_the_engine(tmp_path):
    done = _launch(tmp_path, _model(tmp_path), "sh", "-c", 'echo "engine pid $$"; exit 7')

    assert done.returncode == 7  # the engine's own status: nothing sits between
    assert done.stdout.startswith("engine pid ")
    assert "serve.exec" in done.stderr


def test_the_process_exits_naming_the_field_when_the_model_is_missing(tmp_path):
    (tmp_path / "empty").mkdir()

    done = _launch(tmp_path, tmp_path / "empty", "sh", "-c", "echo should-not-run")

    assert done.returncode == MODEL_MISSING_EXIT
    assert done.stdout == ""
    assert (tmp_path / "termination-log").read_text() == (
        f"source.path: {tmp_path / 'empty'} holds no config.json (not a model folder)"
    )
