from typing import Any

from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

NAVIGATION = [
    ("console:dashboard", _("Dashboard"), "dashboard"),
    ("instances:rent", _("Rent"), "rent"),
    ("instances:list", _("Instances"), "instances"),
    ("clusters:list", _("Clusters"), "clusters"),
    ("endpoints:list", _("Endpoints"), "endpoints"),
    ("console:disks", _("Disks"), "disks"),
    ("console:datasets", _("Datasets"), "datasets"),
    ("billing:billing", _("Billing"), "billing"),
    ("teams:teams", _("Teams"), "teams"),
    ("accounts:tokens", _("API tokens"), "tokens"),
    ("accounts:ssh_keys", _("SSH keys"), "ssh_keys"),
    ("accounts:security", _("Security"), "security"),
    ("accounts:settings", _("Settings"), "settings"),
    ("calculator", _("Cost calculator"), "calculator"),
    ("clusters:plan", _("Parallelism planner"), "planner"),
]


def console(request: HttpRequest) -> dict[str, Any]:
    return {"navigation": NAVIGATION}
