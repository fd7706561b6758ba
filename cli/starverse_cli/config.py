"""Where the CLI keeps its settings, and which API and token a command uses.

The file is `config.json` in the user's config directory (`$XDG_CONFIG_HOME/starverse`, else
`~/.config/starverse`; `%APPDATA%\\starverse` on Windows), written with mode 0600 because it
holds API tokens. It has named profiles; `STARVERSE_API_URL` and `STARVERSE_TOKEN` override the
profile's values, so scripts and CI need no file at all."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_API_URL = "http://127.0.0.1:8000"
DEFAULT_PROFILE = "default"
API_PREFIX = "/api/v1"


class ConfigError(Exception):
    """The config file cannot be read or written."""


def config_dir(environ: dict[str, str] | None = None, system: str = sys.platform) -> Path:
    env = os.environ if environ is None else environ
    if system == "win32" and env.get("APPDATA"):
        return Path(env["APPDATA"]) / "starverse"
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "starverse"


def normalize_api_url(url: str) -> str:
    """The server's base address: without a trailing slash or the /api/v1 suffix, so either
    form may be given."""
    url = url.strip().rstrip("/")
    if url.endswith(API_PREFIX):
        url = url[: -len(API_PREFIX)]
    return url


@dataclass(frozen=True)
class Settings:
    """What one command runs with."""

    api_url: str
    token: str | None
    profile: str
    token_source: str  # "env", "config" or "none", for error messages
    defaulted: bool = False  # api_url is DEFAULT_API_URL: no option, variable or profile named one


class Config:
    """The config file: `{"default_profile": name, "profiles": {name: {api_url, token}}}`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / "config.json"
        self.data: dict[str, Any] = {"default_profile": DEFAULT_PROFILE, "profiles": {}}
        if self.path.exists():
            try:
                loaded = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as error:
                raise ConfigError(f"cannot read {self.path}: {error}") from error
            if not isinstance(loaded, dict) or not isinstance(loaded.get("profiles", {}), dict):
                raise ConfigError(f"{self.path} is not a Starverse config file")
            self.data.update(loaded)

    @property
    def known_hosts(self) -> Path:
        return self.directory / "known_hosts"

    def profile(self, name: str | None) -> dict[str, Any]:
        profiles: dict[str, Any] = self.data["profiles"]
        found = profiles.get(name or self.data.get("default_profile") or DEFAULT_PROFILE)
        return dict(found) if isinstance(found, dict) else {}

    def profile_name(self, name: str | None) -> str:
        return name or str(self.data.get("default_profile") or DEFAULT_PROFILE)

    def set_profile(self, name: str, values: dict[str, Any]) -> None:
        self.data["profiles"][name] = values

    def save(self) -> None:
        """Write atomically with mode 0600 (the file holds tokens): a temporary file in the
        same directory, then a rename."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        text = json.dumps(self.data, indent=2, sort_keys=True) + "\n"
        handle, temporary = tempfile.mkstemp(dir=self.directory, prefix=".config-")
        try:
            os.chmod(temporary, 0o600)
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(temporary, self.path)
        except OSError as error:
            Path(temporary).unlink(missing_ok=True)
            raise ConfigError(f"cannot write {self.path}: {error}") from error

    def settings(
        self,
        *,
        profile: str | None,
        api_url: str | None = None,
        environ: dict[str, str] | None = None,
    ) -> Settings:
        """The command line beats the environment, which beats the profile."""
        env = os.environ if environ is None else environ
        values = self.profile(profile)
        named = api_url or env.get("STARVERSE_API_URL") or values.get("api_url")
        url = named or DEFAULT_API_URL
        token, source = env.get("STARVERSE_TOKEN"), "env"
        if not token:
            token, source = values.get("token"), "config"
        if not token:
            token, source = None, "none"
        return Settings(
            api_url=normalize_api_url(str(url)),
            token=token,
            profile=self.profile_name(profile),
            token_source=source,
            defaulted=not named,
        )
