"""A SkyPilot task YAML read as a Starverse job order, so a user who has one runs it here as it
is (issue 27). What the task asks for that this platform cannot give is never dropped quietly:
each such field comes back as a note the API answers with; what makes the task impossible (no
`run`, a GPU nobody offers) is a TaskError naming the field.

Pure Python over a Catalog the caller fills (`catalog_from_db` from the database), so the
mapping is tested without one and the API reads the database once per order."""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml
from django.utils.translation import gettext as _

MAX_NODES = 128
DEFAULT_NAME = "sky-task"
# Where a task's `workdir` is expected on the shared NAS (mounted at /nas in every pod): the
# CLI's copy and the job's `cd` agree on this folder.
WORKDIR_ROOT = "/nas/workdir"
# A multi-node rank's hosts, one a line (clusters.pods.HOSTS), for SKYPILOT_NODE_IPS.
HOSTS_FILE = "/etc/starverse/hosts"
CLOUD, BARE_METAL = "cloud", "bare_metal"
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOKEN = re.compile(r"[^a-z0-9]+")
_AMOUNT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*(\+?)\s*$", re.IGNORECASE)
_BUCKET = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)


class TaskError(ValueError):
    """The task cannot run here as written; the message names the field and what to change."""


@dataclass(frozen=True)
class CatalogOffering:
    """An active offering as the parser needs it: `id` is what an order names."""

    id: str
    slug: str
    gpu_model_id: str
    gpu_model_name: str
    gpu_count: int
    kind: str  # cloud | bare_metal
    cpu_cores: int
    memory_gb: int


@dataclass(frozen=True)
class CatalogImage:
    id: str
    container_image: str


@dataclass(frozen=True)
class Catalog:
    """What can be ordered, in the catalogue's order; the first image is the default one."""

    offerings: tuple[CatalogOffering, ...]
    images: tuple[CatalogImage, ...]


@dataclass
class Parsed:
    """The job order (the fields of `POST /jobs`) and what of the task was not honoured."""

    order: dict[str, Any]
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Accelerator:
    """One accelerator choice as written (`H100:8` → H100, 8)."""

    name: str
    count: int
    written: str


def catalog_from_db() -> Catalog:
    """The active offerings and images, in the catalogue's own order."""
    from compute.models import Image, Offering

    offerings = Offering.objects.filter(active=True).select_related("gpu_model")
    return Catalog(
        offerings=tuple(
            CatalogOffering(
                id=str(row.id),
                slug=row.slug or "",
                gpu_model_id=row.gpu_model.id,
                gpu_model_name=row.gpu_model.name,
                gpu_count=row.gpu_count,
                kind=row.kind,
                cpu_cores=row.cpu_cores,
                memory_gb=row.memory_gb,
            )
            for row in offerings
        ),
        images=tuple(
            CatalogImage(id=row.id, container_image=row.container_image)
            for row in Image.objects.catalogue()
        ),
    )


def parse_task(text: str, catalog: Catalog, *, env: Mapping[str, str] | None = None) -> Parsed:
    """The job order a SkyPilot task asks for. `env` fills or overrides the task's `envs` and
    `secrets` (SkyPilot's `--env` at launch); an env left null in the task and not given here
    is a TaskError, as SkyPilot refuses it at launch."""
    task = _load(text)
    notes: list[str] = []
    name = _name(task.get("name"))
    node_count = _node_count(1 if task.get("num_nodes") is None else task["num_nodes"])
    resources = _mapping(task.get("resources"), "resources")
    offering = _offering(resources, node_count, catalog, notes)
    order: dict[str, Any] = {
        "name": name,
        "image": _image(resources.get("image_id"), catalog, notes),
        "script": _script(task, name, notes, offering, node_count),
        "offering": offering.id,
        "node_count": node_count,
    }
    envs = _envs(task, env or {})
    if envs:
        order["env"] = envs
    restarts = _max_restarts(resources.get("job_recovery"), notes)
    if restarts is not None:
        order["max_restarts"] = restarts
    _check_size(resources, offering, notes)
    notes += _ignored_resources(resources)
    notes += _file_mount_notes(task.get("file_mounts"))
    notes += _ignored_top_level(task)
    return Parsed(order=order, notes=notes)


# ---------------------------------------------------------------- the document


KNOWN_TOP_LEVEL = frozenset(
    {"name", "workdir", "num_nodes", "resources", "envs", "secrets", "file_mounts", "setup", "run"}
)


def _load(text: str) -> dict[str, Any]:
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as error:
        raise TaskError(
            _("The task is not valid YAML: %(error)s") % {"error": str(error).replace("\n", " ")}
        ) from None
    if len(documents) > 1:
        raise TaskError(
            _(
                "The task has %(count)d YAML documents (a SkyPilot pipeline): submit one task "
                "per job."
            )
            % {"count": len(documents)}
        )
    if not documents or not isinstance(documents[0], dict):
        raise TaskError(_("The task must be a YAML mapping with at least `run`."))
    return {str(key): value for key, value in documents[0].items()}


def _mapping(value: Any, field_name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise TaskError(_("`%(field)s` must be a mapping.") % {"field": field_name})
    return {str(key): item for key, item in value.items()}


def _shown(value: Any) -> str:
    """A value as a user wrote it in YAML, on one line."""
    if isinstance(value, str):
        return value
    dumped = yaml.safe_dump(value, default_flow_style=True, width=10_000, sort_keys=False)
    return str(dumped).strip().removesuffix("...").strip()


def _name(value: Any) -> str:
    if value is None:
        return DEFAULT_NAME
    name = str(value).strip()
    if not name or len(name) > 100:
        raise TaskError(_("`name` must be 1 to 100 characters."))
    return name


def _node_count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TaskError(
            _("`num_nodes: %(value)s` must be a whole number of nodes, at least 1.")
            % {"value": _shown(value)}
        )
    if value > MAX_NODES:
        raise TaskError(
            _("`num_nodes: %(value)d` is over the limit of %(max)d nodes for one job.")
            % {"value": value, "max": MAX_NODES}
        )
    return value


# ---------------------------------------------------------------- environment


def _envs(task: dict[str, Any], given: Mapping[str, str]) -> dict[str, str]:
    """`envs` then `secrets` as strings, `given` over both; null values must be given."""
    merged: dict[str, str | None] = {}
    for field_name in ("envs", "secrets"):
        for key, value in _mapping(task.get(field_name), field_name).items():
            if not ENV_NAME.match(key):
                raise TaskError(
                    _("`%(field)s.%(key)s` is not a valid environment variable name.")
                    % {"field": field_name, "key": key}
                )
            merged[key] = None if value is None else _env_value(value)
    merged.update(given)
    missing = sorted(key for key, value in merged.items() if value is None)
    if missing:
        raise TaskError(
            _(
                "`envs` leaves %(names)s without a value: give each one a value in the task "
                "(SkyPilot's `--env` at launch has no counterpart here)."
            )
            % {"names": ", ".join(missing)}
        )
    return {key: value for key, value in merged.items() if value is not None}


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return _shown(value)
    return str(value)


# ---------------------------------------------------------------- the GPUs


def _offering(
    resources: dict[str, Any], node_count: int, catalog: Catalog, notes: list[str]
) -> CatalogOffering:
    """The first accelerator choice an offering can run; the others are named in a note."""
    choices = _accelerators(resources)
    if not choices:
        models = sorted({o.gpu_model_name for o in catalog.offerings})
        raise TaskError(
            _(
                "`resources.accelerators` is missing: jobs run on GPUs; name one, e.g. "
                "`accelerators: H100:8` (offered here: %(models)s)."
            )
            % {"models": ", ".join(models) or "-"}
        )
    reasons: list[str] = []
    for index, choice in enumerate(choices):
        found, reason = _offering_for(choice, node_count, catalog)
        if found is None:
            reasons.append(reason)
            continue
        if found.gpu_count > choice.count:
            notes.append(
                _(
                    "`resources.accelerators: %(written)s`: a job of %(nodes)d nodes takes whole "
                    "nodes, so each node has %(count)d GPUs (%(offering)s)."
                )
                % {
                    "written": choice.written,
                    "nodes": node_count,
                    "count": found.gpu_count,
                    "offering": found.slug or found.id,
                }
            )
        if len(choices) > 1:
            notes.append(_alternatives_note(choices, index))
        return found
    raise TaskError(reasons[0])


def _alternatives_note(choices: list[Accelerator], chosen: int) -> str:
    others = [choice.written for i, choice in enumerate(choices) if i != chosen]
    return _(
        "`resources.accelerators`: %(chosen)s is used, the first choice offered here; a job "
        "runs on one kind of GPU, so the other choices (%(others)s) are not used."
    ) % {"chosen": choices[chosen].written, "others": ", ".join(others)}


def _accelerators(resources: dict[str, Any]) -> list[Accelerator]:
    """Every accelerator choice in order: `accelerators` (or its alias `gpus`), then those of
    `any_of` and `ordered`."""
    found = _accelerator_list(resources.get("accelerators", resources.get("gpus")))
    for group in ("any_of", "ordered"):
        entries = resources.get(group) or []
        if not isinstance(entries, list):
            raise TaskError(_("`resources.%(field)s` must be a list.") % {"field": group})
        for entry in entries:
            one = _mapping(entry, f"resources.{group}")
            found += _accelerator_list(one.get("accelerators", one.get("gpus")))
    unique: dict[tuple[str, int], Accelerator] = {}
    for choice in found:
        unique.setdefault((choice.name.lower(), choice.count), choice)
    return list(unique.values())


def _accelerator_list(value: Any) -> list[Accelerator]:
    if value is None:
        return []
    if isinstance(value, str):
        return [_accelerator(*_split(value))]
    if isinstance(value, dict):  # {H100: 8}, or a set {A100, H100} (null counts)
        return [_accelerator(str(key), count) for key, count in value.items()]
    if isinstance(value, list):
        return [choice for entry in value for choice in _accelerator_list(entry)]
    raise TaskError(
        _("`resources.accelerators: %(value)s` is not of the form `H100:8`.")
        % {"value": _shown(value)}
    )


def _split(text: str) -> tuple[str, Any]:
    name, _colon, count = text.partition(":")
    return name, count.strip() or None


def _accelerator(name: str, count: Any) -> Accelerator:
    name = name.strip()
    written = name if count is None else f"{name}:{count}"
    try:
        amount = 1.0 if count is None else float(count)
    except (TypeError, ValueError):
        amount = 0.0
    if not name or isinstance(count, bool) or not 0 < amount <= 16:
        raise TaskError(
            _("`resources.accelerators: %(value)s` is not of the form `H100:8`.")
            % {"value": written}
        )
    return Accelerator(name=name, count=math.ceil(amount), written=written)


def _tokens(text: str) -> set[str]:
    return {token for token in _TOKEN.split(text.lower()) if token}


def _is_model(written: str, offering: CatalogOffering) -> bool:
    """Whether a GPU name as SkyPilot users write it (H100, A100-80GB, a100) names this
    offering's model: every token of it is a token of the model's id or name."""
    wanted = _tokens(written)
    model = _tokens(offering.gpu_model_id) | _tokens(offering.gpu_model_name)
    return bool(wanted) and wanted <= model


def _offering_for(
    choice: Accelerator, node_count: int, catalog: Catalog
) -> tuple[CatalogOffering | None, str]:
    """The offering for one choice, or why there is none. One node: an offering with exactly
    that many GPUs (a cloud one first: it need not wait for a whole free node). Several nodes:
    the smallest whole-node offering with at least that many."""
    models = [o for o in catalog.offerings if _is_model(choice.name, o)]
    if not models:
        offered = sorted({o.gpu_model_name for o in catalog.offerings})
        return None, _(
            "`resources.accelerators: %(written)s`: no offering here has %(name)s GPUs "
            "(offered: %(models)s)."
        ) % {"written": choice.written, "name": choice.name, "models": ", ".join(offered) or "-"}
    if node_count == 1:
        exact = [o for o in models if o.gpu_count == choice.count]
        exact.sort(key=lambda o: o.kind != CLOUD)
        if exact:
            return exact[0], ""
        counts = ", ".join(str(n) for n in sorted({o.gpu_count for o in models}))
        return None, _(
            "`resources.accelerators: %(written)s`: %(name)s is offered with %(counts)s GPUs "
            "per node, not %(count)d."
        ) % {
            "written": choice.written,
            "name": models[0].gpu_model_name,
            "counts": counts,
            "count": choice.count,
        }
    whole = sorted(
        (o for o in models if o.kind == BARE_METAL and o.gpu_count >= choice.count),
        key=lambda o: o.gpu_count,
    )
    if whole:
        return whole[0], ""
    return None, _(
        "`num_nodes: %(nodes)d` with `resources.accelerators: %(written)s`: a job of several "
        "nodes takes whole nodes, and no whole-node offering of %(name)s has %(count)d GPUs."
    ) % {
        "nodes": node_count,
        "written": choice.written,
        "name": models[0].gpu_model_name,
        "count": choice.count,
    }


def _amount(value: Any, field_name: str) -> float | None:
    """`4`, `4+`, `32GB+` as a number (GB for memory); None when not given."""
    if value is None:
        return None
    match = _AMOUNT.match(str(value))
    units = {"": 1.0, "g": 1.0, "gb": 1.0, "gi": 1.0, "gib": 1.0, "t": 1024.0, "tb": 1024.0}
    if isinstance(value, bool) or not match or match.group(2).lower() not in units:
        raise TaskError(
            _("`resources.%(field)s: %(value)s` is not a number like 8 or 8+.")
            % {"field": field_name, "value": _shown(value)}
        )
    return float(match.group(1)) * units[match.group(2).lower()]


def _check_size(resources: dict[str, Any], offering: CatalogOffering, notes: list[str]) -> None:
    """CPUs and memory come with the offering: say so when the task asked for more."""
    name = offering.slug or offering.id
    cpus = _amount(resources.get("cpus"), "cpus")
    if cpus is not None and cpus > offering.cpu_cores:
        notes.append(
            _(
                "`resources.cpus: %(value)s`: each node of %(offering)s has %(have)d CPU cores; "
                "the job gets those."
            )
            % {"value": _shown(resources["cpus"]), "offering": name, "have": offering.cpu_cores}
        )
    memory = _amount(resources.get("memory"), "memory")
    if memory is not None and memory > offering.memory_gb:
        notes.append(
            _(
                "`resources.memory: %(value)s`: each node of %(offering)s has %(have)d GB of "
                "memory; the job gets that."
            )
            % {"value": _shown(resources["memory"]), "offering": name, "have": offering.memory_gb}
        )


# ---------------------------------------------------------------- image and command


def _image(value: Any, catalog: Catalog, notes: list[str]) -> str:
    """The catalogue image whose container image `docker:<ref>` names; else the default."""
    if not catalog.images:
        raise TaskError(_("No image is offered here: ask the operator."))
    default = catalog.images[0].id
    if value is None:
        return default
    written = _shown(value)
    if isinstance(value, str) and value.startswith("docker:"):
        reference = _plain_reference(value.removeprefix("docker:"))
        for image in catalog.images:
            if _plain_reference(image.container_image) == reference:
                return image.id
        notes.append(
            _(
                "`resources.image_id: %(value)s` is not one of this platform's images; your own "
                "images come later, so the job runs on the default image %(default)s."
            )
            % {"value": written, "default": default}
        )
        return default
    notes.append(
        _(
            "`resources.image_id: %(value)s` is a cloud machine image; jobs run in containers, "
            "so the job runs on the default image %(default)s (`docker:<image>` names one)."
        )
        % {"value": written, "default": default}
    )
    return default


def _plain_reference(reference: str) -> str:
    """A Docker Hub reference without its implied parts (docker.io/, library/, :latest)."""
    reference = reference.strip().removeprefix("docker.io/").removeprefix("library/")
    if ":" not in reference.rsplit("/", 1)[-1] and "@" not in reference:
        reference += ":latest"
    return reference


def _skypilot_env(offering: CatalogOffering, node_count: int) -> list[str]:
    """SkyPilot's variables, which tasks' `run` commands use to launch across nodes, from the
    rank's environment (clusters.pods.rank_env: NODE_RANK; /etc/starverse/hosts, one host a
    line, rank 0 first), so a task runs here unchanged."""
    return [
        f"export SKYPILOT_NUM_NODES={node_count} SKYPILOT_NUM_GPUS_PER_NODE={offering.gpu_count}",
        'export SKYPILOT_NODE_RANK="${NODE_RANK:-0}" SKYPILOT_TASK_ID="${STARVERSE_JOB_ID:-}"',
        f'SKYPILOT_NODE_IPS="$(cat {HOSTS_FILE} 2>/dev/null || echo 127.0.0.1)"',
        "export SKYPILOT_NODE_IPS",
    ]


def _script(
    task: dict[str, Any],
    name: str,
    notes: list[str],
    offering: CatalogOffering,
    node_count: int,
) -> str:
    """Bash that sets SkyPilot's variables, cds into the workdir, runs `setup` and stops with
    its exit code if it fails, then becomes `run`, whose exit code is the job's. Each runs in
    its own bash, as SkyPilot runs them, so neither is changed by the other's `set -e` or
    `exit`."""
    run = task.get("run")
    if not isinstance(run, str) or not run.strip():
        raise TaskError(_("`run` is missing: it is the command the job runs (a string)."))
    setup = task.get("setup")
    if setup is not None and not isinstance(setup, str):
        raise TaskError(_("`setup` must be a string of shell commands."))
    lines = ["set -e", *_skypilot_env(offering, node_count)]
    workdir = _workdir(task.get("workdir"), name, notes)
    if workdir:
        lines.append(f"cd {shlex.quote(workdir)}")
    if setup and setup.strip():
        lines.append(f"bash -c {shlex.quote(setup)}")
    lines.append(f"exec bash -c {shlex.quote(run)}")
    return "\n".join(lines) + "\n"


def workdir_path(name: str) -> str:
    """The NAS folder a task's `workdir` is copied to and run in: /nas/workdir/<name>, the
    name made safe for a path."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or DEFAULT_NAME
    return f"{WORKDIR_ROOT}/{safe}"


def _workdir(value: Any, name: str, notes: list[str]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TaskError(
            _("`workdir: %(value)s` must be a local folder; git sources are not supported.")
            % {"value": _shown(value)}
        )
    path = workdir_path(name)
    notes.append(
        _(
            "`workdir: %(value)s` is not uploaded with the task: the job runs in %(path)s on "
            "your NAS, so copy the folder there first."
        )
        % {"value": value, "path": path}
    )
    return path


def _max_restarts(value: Any, notes: list[str]) -> int | None:
    """`job_recovery` as the restart policy: `max_restarts_on_errors` → max_restarts; lost
    nodes are always replaced, whatever the strategy."""
    if value is None:
        return None
    if isinstance(value, str):
        value = {"strategy": value}
    recovery = _mapping(value, "resources.job_recovery")
    strategy = recovery.get("strategy")
    if isinstance(strategy, str) and strategy.lower() == "none":
        notes.append(
            _(
                "`resources.job_recovery: none`: lost nodes are still replaced here; the job "
                "is not restarted after its command fails."
            )
        )
        return 0
    if strategy is not None:
        notes.append(
            _(
                "`resources.job_recovery.strategy: %(value)s` is ignored: a lost node is "
                "replaced on this platform's cluster and the job resumes."
            )
            % {"value": _shown(strategy)}
        )
    restarts = recovery.get("max_restarts_on_errors")
    if restarts is None:
        return None
    if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
        raise TaskError(
            _("`resources.job_recovery.max_restarts_on_errors` must be a whole number, 0 or more.")
        )
    return restarts


# ---------------------------------------------------------------- what is not honoured


def _resource_notes() -> dict[str, str]:
    """Per `resources` field, the note saying what happens instead: a whole sentence of
    `field` and `value`, so a translation can order it as its language needs."""
    cluster = _("`resources.%(field)s: %(value)s` is ignored: jobs run on this platform's cluster.")
    return {
        "cloud": cluster,
        "infra": cluster,
        "region": cluster,
        "zone": cluster,
        "instance_type": _(
            "`resources.%(field)s: %(value)s` is ignored: the offering chosen from "
            "`accelerators` sets the node."
        ),
        "use_spot": _(
            "`resources.%(field)s: %(value)s` is ignored: jobs run on on-demand GPUs and are "
            "never preempted."
        ),
        "disk_size": _(
            "`resources.%(field)s: %(value)s` is ignored: each node has the offering's local "
            "disk; for more, attach a cloud disk (`disks`) or use the NAS."
        ),
        "disk_tier": _("`resources.%(field)s: %(value)s` is ignored: local disks are NVMe."),
        "network_tier": _(
            "`resources.%(field)s: %(value)s` is ignored: whole-node jobs use the cluster's "
            "InfiniBand fabric."
        ),
        "ports": _(
            "`resources.%(field)s: %(value)s` is ignored: jobs publish no ports; use an instance "
            "or an endpoint to serve."
        ),
        "labels": _(
            "`resources.%(field)s: %(value)s` is ignored: jobs carry the platform's own labels."
        ),
        "autostop": _(
            "`resources.%(field)s: %(value)s` is ignored: a job's GPUs are released as soon as "
            "it ends."
        ),
        "max_hourly_cost": _(
            "`resources.%(field)s: %(value)s` is ignored: the offering's price applies."
        ),
        "accelerator_args": _(
            "`resources.%(field)s: %(value)s` is ignored: it is for TPUs, which are not offered."
        ),
    }


HANDLED_RESOURCES = frozenset(
    {"accelerators", "gpus", "any_of", "ordered", "cpus", "memory", "image_id", "job_recovery"}
)


def _ignored_resources(resources: dict[str, Any]) -> list[str]:
    known = _resource_notes()
    notes = []
    for key, value in resources.items():
        if key in HANDLED_RESOURCES or value is None:
            continue
        sentence = known.get(key) or _(
            "`resources.%(field)s: %(value)s` is not known here and is ignored."
        )
        notes.append(sentence % {"field": key, "value": _shown(value)})
    notes += _location_notes(resources)
    return notes


def _location_notes(resources: dict[str, Any]) -> list[str]:
    """Where `any_of`/`ordered` entries name clouds or regions: said once per list."""
    notes = []
    for group in ("any_of", "ordered"):
        entries = resources.get(group) or []
        if any(set(entry) - {"accelerators", "gpus"} for entry in entries):
            notes.append(
                _(
                    "`resources.%(field)s`: the clouds, regions and other settings of its "
                    "entries are ignored: jobs run on this platform's cluster."
                )
                % {"field": group}
            )
    return notes


def _file_mount_notes(value: Any) -> list[str]:
    notes = []
    for target, source in _mapping(value, "file_mounts").items():
        origin = source.get("source") if isinstance(source, dict) else source
        if isinstance(origin, str) and not _BUCKET.match(origin):
            notes.append(
                _(
                    "`file_mounts.%(target)s: %(source)s` is not copied: copy the local path to "
                    "your NAS (under /nas) and read it from there."
                )
                % {"target": target, "source": origin}
            )
        else:
            notes.append(
                _(
                    "`file_mounts.%(target)s: %(source)s` is not mounted: bucket mounts are not "
                    "supported; copy the data to your NAS or a cloud disk."
                )
                % {"target": target, "source": _shown(origin if origin is not None else source)}
            )
    return notes


def _ignored_top_level(task: dict[str, Any]) -> Iterator[str]:
    for key, value in task.items():
        if key in KNOWN_TOP_LEVEL or value is None:
            continue
        if key == "service":
            yield _(
                "`service` is ignored: a job runs to its end; serve a model as an endpoint instead."
            )
        elif key == "event_callback":
            yield _(
                "`event_callback` is ignored: a job's end is e-mailed; watch it with `starverse "
                "jobs show` or `GET /api/v1/jobs/<id>/events`."
            )
        else:
            yield _("`%(field)s` is not known here and is ignored.") % {"field": key}
