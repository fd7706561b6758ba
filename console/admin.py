"""The operator overview in the admin: utilisation per GPU model over the last 7 days, an
occupancy heat map per node, revenue per day, the top tenants and the queue, drawn as inline SVG
here (the admin's pages run no console script). Listed on the admin's index under Console; it
needs the permission console.view_overview (superusers hold it)."""

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from console.models import OperatorOverview
from console.overview import Overview, capacity_mix, operator_overview
from starverse.core.money import format_fen

PERM = "console.view_overview"
# One colour per GPU model line, in the order of the models (then again from the first).
COLOURS = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2"]
ROW_PX = 14
# Node names longer than this lose their middle ("gpu-h100-ra…slot07-ib"): pools share a prefix,
# and the end tells the nodes apart.
NAME_CHARS = 25


def _wait(seconds: float) -> str:
    minutes = int(seconds // 60)
    if minutes < 60:
        return _("%(m)d min") % {"m": minutes}
    return _("%(h)d h %(m)d min") % {"h": minutes // 60, "m": minutes % 60}


def _short(name: str) -> str:
    if len(name) <= NAME_CHARS:
        return name
    keep = (NAME_CHARS - 1) // 2
    return f"{name[:keep]}…{name[-keep:]}"


def _charts(data: Overview) -> dict[str, Any]:
    """Coordinates for the template's SVG: x in hours (or days) from the first, y in percent
    of the chart's height, so each chart scales to the page's width."""
    hours = len(data.hours)
    local = [timezone.localtime(hour) for hour in data.hours]
    days = [
        {"x": i, "left": round(100 * i / hours, 3), "label": date_format(at, "m-d")}
        for i, at in enumerate(local)
        if at.hour == 0
    ]
    lines = []
    for n, model in enumerate(data.models):
        points = " ".join(f"{i + 0.5},{100 - pct:.1f}" for i, pct in enumerate(model.percent))
        lines.append({"model": model, "colour": COLOURS[n % len(COLOURS)], "points": points})
    cells = []
    for row, node in enumerate(data.nodes):
        for i, gpus in enumerate(node.gpus):
            if gpus > 0:
                share = min(gpus / node.gpu_count, 1.0) if node.gpu_count else 1.0
                tip = _("%(node)s · %(hour)s · %(gpus)s of %(count)d GPUs") % {
                    "node": node.name,
                    "hour": date_format(local[i], "m-d H:00"),
                    "gpus": f"{gpus:g}",
                    "count": node.gpu_count,
                }
                cells.append(
                    {"x": i, "y": row, "opacity": f"{0.15 + 0.85 * share:.2f}", "tip": tip}
                )
    top = max((day["revenue_fen"] for day in data.days), default=0) or 1
    bars = []
    for i, day in enumerate(data.days):
        height = 95 * day["revenue_fen"] / top
        cash = 95 * day["cash_fen"] / top
        bars.append(
            {
                "x": i + 0.1,
                "y": f"{100 - height:.2f}",
                "height": f"{height:.2f}",
                "cash_y": f"{100 - cash:.2f}",
                "cash_height": f"{cash:.2f}",
                "label": date_format(day["day"], "m-d"),
                "left": round(100 * i / len(data.days), 3),
                "tick": i % 5 == 0,
                "revenue": format_fen(day["revenue_fen"]),
                "cash": format_fen(day["cash_fen"]),
            }
        )
    return {
        "hours": hours,
        "day_ticks": days,
        "lines": lines,
        "cells": cells,
        "map_rows": len(data.nodes),
        "map_names": [(node, _short(node.name)) for node in data.nodes],
        "map_height": max(len(data.nodes), 1) * ROW_PX,
        "row_px": ROW_PX,
        "bars": bars,
        "days": len(data.days),
    }


def _labels(data: Overview, revenue_total: str) -> dict[str, str]:
    """The page's words, here rather than in the template so the catalogue (bin/messages,
    which reads Python and the console's templates) holds them."""
    nodes = len(data.nodes)
    return {
        "intro": _(
            "As of %(at)s. Utilisation is the share of each model's GPUs held by instances "
            "(placed, running or stopping), hour by hour; revenue is usage charged, in CNY."
        )
        % {"at": date_format(timezone.localtime(data.now), "Y-m-d H:i")},
        "utilisation": _("Utilisation per GPU model, last 7 days"),
        "utilisation_label": _("Utilisation per GPU model"),
        "gpu_model": _("GPU model"),
        "gpus": _("GPUs"),
        "now": _("Now"),
        "average": _("7-day average"),
        "peak": _("Peak hour"),
        "no_nodes": _("No nodes yet."),
        "occupancy": ngettext(
            "Occupancy per node, last 7 days (%(n)d node)",
            "Occupancy per node, last 7 days (%(n)d nodes)",
            nodes,
        )
        % {"n": nodes},
        "map_label": _("Allocated GPUs per node and hour"),
        "map_help": _(
            "Each cell is one hour; the darker, the more of the node's GPUs were allocated. "
            "Hover for the numbers."
        ),
        "revenue": _("Revenue per day, last 30 days: %(total)s") % {"total": revenue_total},
        "revenue_label": _("Revenue per day"),
        "cash": _("Cash"),
        "cash_lower": _("cash"),
        "trial": _("Trial credit"),
        "tenants": _("Top tenants by spend, last 30 days"),
        "tenant": _("Tenant"),
        "spend": _("Spend"),
        "gpus_running": _("GPUs running"),
        "no_usage": _("No usage in the last 30 days."),
        "queue": _("Queue"),
        "orders_waiting": _("Orders waiting"),
        "oldest_wait": _("Oldest wait"),
        "no_queue": _("No orders waiting."),
        **_mix_labels(),
    }


def _mix_labels() -> dict[str, str]:
    """The capacity mix's words (_labels)."""
    return {
        "mix": _("GPUs by who holds them, per model and region"),
        "region": _("Region"),
        "hourly": _("Hourly"),
        "monthly": _("Monthly"),
        "spot": _("Spot"),
        "idle": _("Idle"),
        "kept_from_spot": _("Of which kept from spot"),
        "out_of_service": _("Out of service"),
        "allocation_30d": _("Allocated, 30 days"),
        "spot_revenue_30d": _("Spot revenue, 30 days"),
        "preemptions_30d": _("Preemptions, 30 days"),
        "mix_help": _(
            "GPUs held now by hourly, monthly and spot rentals, idle (ready and free) and out "
            "of service (lost, or on a node not ready). Allocated is the share of the GPU-hours "
            "of the last 30 days held by instances, of the GPUs in the fleet now; instances in "
            "no-GPU mode hold none (a monthly rental's stay reserved). Kept from spot: the "
            "GPUs kept free for the next paying orders of each size (SPOT_HEADROOM)."
        ),
    }


@admin.register(OperatorOverview)
class OperatorOverviewAdmin(admin.ModelAdmin):
    """No list, no form: the model's one admin address is the overview page."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(PERM)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list:
        return [
            path(
                "",
                self.admin_site.admin_view(self.overview_view),
                name="console_operatoroverview_changelist",
            )
        ]

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        data = operator_overview()
        for row in data.queue:
            row["wait_text"] = _wait(row["wait"].total_seconds())
        for tenant in data.tenants:
            tenant["spent"] = format_fen(tenant["spent_fen"])
        mix = [(row, format_fen(row.spot_revenue_fen)) for row in capacity_mix(data.now)]
        context = {
            **self.admin_site.each_context(request),
            "title": _("Operator overview"),
            "opts": OperatorOverview._meta,
            "overview": data,
            "mix": mix,
            "chart": _charts(data),
            "t": _labels(data, format_fen(data.revenue_fen)),
        }
        return TemplateResponse(request, "admin/console/overview.html", context)
