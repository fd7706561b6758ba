"""The catalog's images, checked without building them (they build where a registry is
reachable): every Dockerfile has a pinned base, carries the init package (itself or through the
image it builds on), bakes in no secret, and agrees with matrix.yaml, which agrees with the
catalog that seed_catalog writes and with build.sh."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.conf import settings

from endpoints.engines import engine_image
from endpoints.manifests import SERVE_COMMAND
from instances.management.commands.seed_catalog import IMAGES
from instances.provisioning.manifests import INIT_COMMAND

IMAGES_DIR = Path(__file__).resolve().parents[2] / "deploy" / "images"
MATRIX: list[dict[str, Any]] = yaml.safe_load((IMAGES_DIR / "matrix.yaml").read_text())["images"]
TAGS = [image["tag"] for image in MATRIX]
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|PRIVATE|CREDENTIAL|API_?KEY|ACCESS_?KEY", re.I)
SECRET_VALUE = re.compile(
    r"-----BEGIN|sk_live_|sk_test_|ghp_[A-Za-z0-9]{20}|AKIA[0-9A-Z]{16}|xox[bp]-|hf_[A-Za-z0-9]{20}"
)
PIN = re.compile(r"([A-Za-z0-9_.-]+)(?:\[[\w,]+\])?==(\S+)")


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments left out."""
    joined, pending = [], ""
    for line in dockerfile.read_text().splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    assert not pending, f"{dockerfile} ends inside a continued line"
    result = []
    for line in joined:
        keyword, _space, rest = line.strip().partition(" ")
        result.append((keyword.upper(), rest.strip()))
    return result


def _of(image: dict[str, Any]) -> list[tuple[str, str]]:
    return instructions(IMAGES_DIR / image["dockerfile"])


def test_the_matrix_names_every_dockerfile_and_nothing_else():
    on_disk = sorted(str(p.relative_to(IMAGES_DIR)) for p in IMAGES_DIR.glob("*/Dockerfile"))
    assert sorted(image["dockerfile"] for image in MATRIX) == on_disk
    assert len(set(TAGS)) == len(TAGS) == 7


def test_the_catalog_references_exactly_the_matrix_tags():
    assert [(key, reference) for key, _name, _text, reference in IMAGES] == [
        (image["catalog"], image["tag"]) for image in MATRIX
    ]


def test_every_version_in_the_matrix_is_an_exact_string():
    for image in MATRIX:
        for table in ("versions", "packages", "git"):
            for name, version in (image.get(table) or {}).items():
                assert isinstance(version, str) and version, (image["tag"], name, version)
        assert image["versions"]["cuda"].startswith("12.")


def test_the_endpoints_engines_default_to_the_engine_images():
    engines = {image["engine"]: image["tag"] for image in MATRIX if "engine" in image}

    assert engines == {
        "tensorrt-llm": "starverse/tensorrt-llm-serve:0.17-cuda12.8",
        "vllm": "starverse/vllm:0.6-cuda12.1",
    }
    assert engines["tensorrt-llm"] == settings.ENDPOINT_IMAGE_TENSORRT_LLM
    assert {engine: engine_image(engine) for engine in engines} == engines


@pytest.mark.parametrize("image", MATRIX, ids=TAGS)
def test_the_base_is_pinned_and_the_one_the_matrix_names(image):
    froms = [rest for keyword, rest in _of(image) if keyword == "FROM"]

    assert froms == [image["base"]]  # one stage, the base as written in the matrix
    base = image["base"]
    assert "$" not in base, "a base chosen by a build argument is not pinned"
    name, _at, digest = base.partition("@")
    if digest:
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
    else:
        tag = name.rpartition(":")[2] if ":" in name.rpartition("/")[2] else ""
        assert tag and tag != "latest" and re.search(r"\d", tag), f"{base} is not pinned"
    if base in TAGS:  # built on another catalog image: it must come earlier in the matrix
        assert TAGS.index(base) < TAGS.index(image["tag"])


@pytest.mark.parametrize("image", MATRIX, ids=TAGS)
def test_every_image_carries_the_init_package(image):
    steps = _of(image)
    if image["base"] in TAGS:
        # it has the init of the image it builds on, and keeps its entrypoint
        assert not any(keyword in ("ENTRYPOINT", "CMD") for keyword, _rest in steps)
        return
    assert ("COPY", "init/ /opt/starverse/init/") in steps
    assert ("RUN", "sh /opt/starverse/init/install.sh") in steps
    entrypoint = [rest for keyword, rest in steps if keyword == "ENTRYPOINT"]
    exposed = {rest for keyword, rest in steps if keyword == "EXPOSE"}
    if "engine" in image:  # an endpoint's engine: what its Deployment runs, on port 8000
        assert entrypoint == ['["' + '", "'.join(SERVE_COMMAND) + '"]']
        assert exposed == {"8000"}
        return
    assert entrypoint == ['["' + '", "'.join(INIT_COMMAND) + '"]']
    assert exposed == {"22 8888"}


def test_the_init_install_script_gives_what_the_init_needs():
    script = (IMAGES_DIR / "init" / "install.sh").read_text()

    assert "openssh-server tini" in script
    assert "rm -f /etc/ssh/ssh_host_*" in script  # no host key baked into the image
    assert "ln -sf /opt/starverse/init/bin/starverse-init /opt/starverse/bin/starverse-init" in (
        script
    )
    assert INIT_COMMAND[0] == "/usr/bin/tini" and "test -x /usr/bin/tini" in script
    launcher = IMAGES_DIR / "init" / "bin" / "starverse-init"
    assert launcher.stat().st_mode & 0o111
    assert "exec python3 -I" in launcher.read_text()
    serve = IMAGES_DIR / "init" / "bin" / "starverse-serve"
    assert serve.stat().st_mode & 0o111
    assert "from starverse_init.serve import main" in serve.read_text()
    assert "ln -sf /opt/starverse/init/bin/starverse-serve /opt/starverse/bin/starverse-serve" in (
        script
    )
    assert (IMAGES_DIR / "init" / "starverse_init" / "__main__.py").exists()


@pytest.mark.parametrize("image", MATRIX, ids=TAGS)
def test_no_secret_is_baked_in(image):
    text = (IMAGES_DIR / image["dockerfile"]).read_text()
    for keyword, rest in _of(image):
        if keyword in ("ENV", "ARG", "LABEL"):
            names = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", rest) or [rest.split()[0]]
            assert not [n for n in names if SECRET_NAME.search(n)], f"{keyword} {rest}"
        if keyword in ("COPY", "ADD"):
            assert not re.search(r"id_rsa|id_ed25519|ssh_host_|\.pem\b|\.key\b|\.env\b", rest)
            assert not rest.startswith(("http://", "https://"))
    assert not SECRET_VALUE.search(text)
    assert "--secret" not in text or "--mount=type=secret" in text


def _requirements(text: str) -> list[str]:
    """What every `pip install` of the RUN steps is asked for, options and their values left
    out."""
    found = []
    for command in re.findall(r"pip install ([^&;\n]*)", text):
        skip = False
        for word in shlex.split(command):
            if skip:
                skip = False
            elif word in ("--index-url", "--extra-index-url", "-i"):
                skip = True
            elif not word.startswith("-"):
                found.append(word)
    return found


@pytest.mark.parametrize("image", MATRIX, ids=TAGS)
def test_the_dockerfile_installs_exactly_the_matrix_versions(image):
    text = "\n".join(rest for keyword, rest in _of(image) if keyword == "RUN")
    requirements = _requirements(text)
    pinned = [PIN.fullmatch(r) for r in requirements]
    git = [r for r in requirements if " @ git+" in r]

    assert len(requirements) == len([m for m in pinned if m]) + len(git), requirements
    assert {m.group(1): m.group(2) for m in pinned if m} == image["packages"]
    assert git == [f"{name} @ git+{source}" for name, source in (image.get("git") or {}).items()]
    for source in (image.get("git") or {}).values():
        assert re.search(r"@v\d+(\.\d+)+$|@[0-9a-f]{40}$", source), f"{source} is not pinned"


def test_build_sh_dry_run_builds_the_matrix_in_order():
    out = subprocess.run(
        ["bash", str(IMAGES_DIR / "build.sh"), "--dry-run"],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()

    assert [line.split("--tag ")[1].split()[0] for line in out] == TAGS
    for line, image in zip(out, MATRIX, strict=True):
        assert line.startswith("docker buildx build --platform linux/amd64 --load ")
        assert f"--file {IMAGES_DIR / image['dockerfile']} {IMAGES_DIR}" in line


def test_build_sh_refuses_a_tag_not_in_the_matrix():
    done = subprocess.run(
        ["bash", str(IMAGES_DIR / "build.sh"), "--dry-run", "starverse/unknown:1"],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 2
    assert "starverse/unknown:1 is not in matrix.yaml" in done.stderr
