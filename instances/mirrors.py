"""Academic mirrors (学术加速): the operator's mirrors for pip, conda, Hugging Face, GitHub and
container registries (settings MIRROR_*), as the environment an instance's container gets
(unless its `mirrors` is off) and as the list the console shows."""

from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class Mirror:
    """One configured mirror: what it is for (a short label) and where it points."""

    kind: str
    target: str


def mirrors_configured() -> list[Mirror]:
    """The operator's mirrors, in a fixed order; empty when none is configured."""
    found = [
        Mirror("pip", settings.MIRROR_PIP_INDEX_URL),
        Mirror("conda", ", ".join(settings.MIRROR_CONDA_CHANNELS)),
        Mirror("HF", settings.MIRROR_HF_ENDPOINT),
        Mirror("GitHub", settings.MIRROR_GITHUB_PROXY),
        Mirror("registries", ", ".join(settings.MIRROR_REGISTRIES)),
    ]
    return [mirror for mirror in found if mirror.target]


def mirror_env() -> dict[str, str]:
    """The variables that point the tools at the mirrors: pip and uv read the index, conda
    its channels (a comma-separated CONDA_CHANNELS is conda's own form of the `channels`
    setting), huggingface_hub HF_ENDPOINT; GITHUB_PROXY is a prefix the user puts before a
    github.com URL (docs/user-guide.md). Registries are not in the environment."""
    env: dict[str, str] = {}
    if settings.MIRROR_PIP_INDEX_URL:
        env["PIP_INDEX_URL"] = settings.MIRROR_PIP_INDEX_URL
        env["UV_DEFAULT_INDEX"] = settings.MIRROR_PIP_INDEX_URL
    if settings.MIRROR_CONDA_CHANNELS:
        env["CONDA_CHANNELS"] = ",".join(settings.MIRROR_CONDA_CHANNELS)
    if settings.MIRROR_HF_ENDPOINT:
        env["HF_ENDPOINT"] = settings.MIRROR_HF_ENDPOINT
    if settings.MIRROR_GITHUB_PROXY:
        env["GITHUB_PROXY"] = settings.MIRROR_GITHUB_PROXY
    return env
