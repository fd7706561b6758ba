"""The inference engines an endpoint runs, the options a user may pass to each, and the
command line those options make. Options outside an engine's list, or values outside an
option's, are refused with the option named (`engine_options.<key>`): an engine must never
meet a flag it does not know at start-up, where the failure would cost a cold start.

TensorRT-LLM builds an engine from the checkpoint at start (trtllm-build, then trtllm-serve);
vLLM loads it directly (vllm serve). Both answer OpenAI's API on port 8000 and report
readiness on GET /health."""

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils.functional import Promise
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from endpoints.choices import Engine
from starverse.core.errors import InvalidInput

MODEL_DIR = "/model"
ENGINE_PORT = 8000
# The engine images' entry point exits with this when /model holds no config.json
# (deploy/images/init/starverse_init/serve.py; a test keeps the two equal).
MODEL_MISSING_EXIT = 66


@dataclass(frozen=True)
class Option:
    """One engine option: its flag, the check a value passes (returns the value to use), its
    name and what it does in the reader's language, and the values it takes when it is a
    choice."""

    flag: str
    check: Callable[[Any], Any]
    label: str | Promise
    help: str | Promise
    choices: tuple[str, ...] = ()


def _choice(*allowed: str) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value not in allowed:
            raise ValueError(_("one of %(allowed)s") % {"allowed": ", ".join(allowed)})
        return value

    return check


def _integer(low: int, high: int) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(
                _("a whole number from %(low)d to %(high)d") % {"low": low, "high": high}
            )
        return value

    return check


def _fraction(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.1 <= value <= 0.99:
        raise ValueError(_("a number from 0.1 to 0.99"))
    return float(value)


GPUS = _integer(1, 8)
TRT_QUANTIZATION = ("none", "fp8", "int8", "int4_awq")
VLLM_QUANTIZATION = ("none", "awq", "gptq", "fp8")
DTYPES = ("auto", "float16", "bfloat16")
_QUANTIZATION = gettext_lazy("Quantization")
_QUANTIZATION_HELP = gettext_lazy(
    "The weights' precision: lower precision uses less GPU memory, at some cost in accuracy."
)
_PARALLEL = gettext_lazy("Tensor parallel GPUs")
_PARALLEL_HELP = gettext_lazy(
    "How many GPUs one replica spreads the model over; empty: every GPU of the offering."
)
OPTIONS: dict[str, dict[str, Option]] = {
    Engine.TENSORRT_LLM: {
        "quantization": Option(
            "--quantization",
            _choice(*TRT_QUANTIZATION),
            _QUANTIZATION,
            _QUANTIZATION_HELP,
            TRT_QUANTIZATION,
        ),
        "max_batch_size": Option(
            "--max_batch_size",
            _integer(1, 2048),
            gettext_lazy("Max batch size"),
            gettext_lazy("Requests the engine runs together in one batch (1 to 2048)."),
        ),
        "max_input_len": Option(
            "--max_input_len",
            _integer(16, 131072),
            gettext_lazy("Max prompt tokens"),
            gettext_lazy("The longest prompt accepted, in tokens (16 to 131072)."),
        ),
        "max_seq_len": Option(
            "--max_seq_len",
            _integer(16, 131072),
            gettext_lazy("Max sequence tokens"),
            gettext_lazy("Prompt plus output, in tokens (16 to 131072)."),
        ),
        "tp_size": Option("--tp_size", GPUS, _PARALLEL, _PARALLEL_HELP),
    },
    Engine.VLLM: {
        "quantization": Option(
            "--quantization",
            _choice(*VLLM_QUANTIZATION),
            _QUANTIZATION,
            _QUANTIZATION_HELP,
            VLLM_QUANTIZATION,
        ),
        "max_model_len": Option(
            "--max-model-len",
            _integer(16, 131072),
            gettext_lazy("Context length"),
            gettext_lazy(
                "Prompt plus output, in tokens (16 to 131072); empty: the model's own length."
            ),
        ),
        "gpu_memory_utilization": Option(
            "--gpu-memory-utilization",
            _fraction,
            gettext_lazy("GPU memory share"),
            gettext_lazy(
                "The share of each GPU's memory the engine takes for weights and cache "
                "(0.1 to 0.99)."
            ),
        ),
        "dtype": Option(
            "--dtype",
            _choice(*DTYPES),
            gettext_lazy("Data type"),
            gettext_lazy("The activations' number type; auto: the model's own."),
            DTYPES,
        ),
        "tensor_parallel_size": Option("--tensor-parallel-size", GPUS, _PARALLEL, _PARALLEL_HELP),
    },
}
# The option that spreads the model over GPUs: it defaults to the offering's GPU count.
PARALLEL: dict[str, str] = {Engine.TENSORRT_LLM: "tp_size", Engine.VLLM: "tensor_parallel_size"}


def engine_validate(engine: str, options: Any, gpu_count: int) -> dict[str, Any]:
    """The options checked one by one against the engine's list, with the parallel degree
    defaulted to the GPU count (and at most that)."""
    if engine not in OPTIONS:
        raise InvalidInput(
            _("Unknown engine %(engine)s: choose one of %(engines)s.")
            % {"engine": engine, "engines": ", ".join(OPTIONS)},
            code="unknown_engine",
            field="engine",
        )
    if not isinstance(options, dict):
        raise InvalidInput(
            _("engine_options must be an object of option → value."), field="engine_options"
        )
    known = OPTIONS[engine]
    checked: dict[str, Any] = {}
    for key, value in options.items():
        field = f"engine_options.{key}"
        if key not in known:
            raise InvalidInput(
                _("%(engine)s has no option %(key)s; it knows %(known)s.")
                % {"engine": Engine(engine).label, "key": key, "known": ", ".join(known)},
                code="unknown_engine_option",
                field=field,
            )
        try:
            checked[key] = known[key].check(value)
        except ValueError as error:
            raise InvalidInput(
                _("%(key)s must be %(rule)s.") % {"key": key, "rule": error},
                code="invalid_engine_option",
                field=field,
            ) from None
    parallel = PARALLEL[engine]
    degree = checked.setdefault(parallel, gpu_count)
    if degree > gpu_count or gpu_count % degree:
        raise InvalidInput(
            _("%(key)s must divide the offering's %(gpus)d GPUs.")
            % {"key": parallel, "gpus": gpu_count},
            code="invalid_engine_option",
            field=f"engine_options.{parallel}",
        )
    return checked


def engine_image(engine: str) -> str:
    return {
        Engine.TENSORRT_LLM: settings.ENDPOINT_IMAGE_TENSORRT_LLM,
        Engine.VLLM: settings.ENDPOINT_IMAGE_VLLM,
    }[Engine(engine)]


def engine_args(engine: str, options: dict[str, Any], model_name: str) -> list[str]:
    """The engine server's command line, from the endpoint's options (in the list's order)."""
    flags = []
    for key, option in OPTIONS[engine].items():
        if key in options and not (key == "quantization" and options[key] == "none"):
            flags += [option.flag, str(options[key])]
    if engine == Engine.TENSORRT_LLM:
        return [
            "trtllm-serve",
            MODEL_DIR,
            "--host",
            "0.0.0.0",  # noqa: S104 - inside the pod, behind its Service
            "--port",
            str(ENGINE_PORT),
            "--served_model_name",
            model_name,
            *flags,
        ]
    return [
        "vllm",
        "serve",
        MODEL_DIR,
        "--host",
        "0.0.0.0",  # noqa: S104 - inside the pod, behind its Service
        "--port",
        str(ENGINE_PORT),
        "--served-model-name",
        model_name,
        *flags,
    ]


def engine_command(engine: str, options: dict[str, Any], model_name: str) -> str:
    """The command line as the user is shown it."""
    return shlex.join(engine_args(engine, options, model_name))
