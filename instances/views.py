"""Console pages for instances: renting, the list, an instance's page and its actions. They
read through the selectors and change things only through instances.lifecycle."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from billing.calculator import presets_shown
from billing.models import Wallet
from billing.selectors import wallet_for_tenant
from billing.services import trial_minutes
from compute.admission import ORDER_KEY_PREFIX, runway_funds
from compute.choices import BillingMode, OfferingKind
from compute.models import Image, Offering
from compute.preemption import preemption_rates
from fleet.models import Region
from instances.api.serializers import InstanceOutput
from instances.choices import InstanceStatus
from instances.clones import CLONEABLE, instance_clone
from instances.gangs import gang_hooks, gang_of, workload_owner_link
from instances.gateway import MAX_PORTS
from instances.gateway_views import gateway_ports, new_share_take
from instances.images import SAVABLE, Saving, image_delete, image_save
from instances.lifecycle import instance_order, instance_start, instance_stop, instance_terminate
from instances.mirrors import mirrors_configured
from instances.models import Instance
from instances.schedules import (
    MAX_STOP_AFTER_HOURS,
    IdleStop,
    idle_stop_clean,
    instance_keep_running,
    instance_schedule_set,
)
from instances.selectors import (
    PriceNow,
    availability,
    calculator_offerings,
    image_warmth,
    instance_metrics,
    offering_price_now,
)
from instances.volumes import disk_attach, disk_detach
from starverse.accounts.audit import audit_request
from starverse.accounts.models import IDLE_MINUTES_RANGE, IDLE_UTIL_PCT_RANGE, SshKey
from starverse.accounts.selectors import user_settings
from starverse.core.console import (
    form_token,
    page_user,
    redirect_back,
    run_change,
    run_service,
)
from starverse.core.dates import parse_moment
from starverse.core.errors import IdempotencyConflict, InvalidInput, ServiceError
from starverse.core.money import format_fen
from starverse.core.tenancy import get_for_user, scope_to_user
from starverse.core.text import localized
from storage.models import Disk
from storage.nas import nas_for_tenant
from storage.selectors import free_disks

S = InstanceStatus
# Which actions an instance offers in each status (the services refuse the rest anyway).
CAN_STOP = (S.RUNNING, S.CHECKING, S.PROVISIONING)
# A clone's Idempotency-Key: the token of the instance's page that posted it.
CLONE_KEY_PREFIX = "console-clone:"
CAN_START = (S.STOPPED, S.FAILED)
# Statuses that change on their own within seconds: the page watches them closely.
TRANSIENT = (S.QUEUED, S.PROVISIONING, S.STOPPING, S.TERMINATING)


IDLE_UTIL_ERROR = gettext_lazy("Idle auto-stop: the utilisation is from 1 to 100 %.")
IDLE_MINUTES_ERROR = gettext_lazy("Idle auto-stop: the idle time is from 10 to 1440 minutes.")
STOP_AFTER_ERROR = gettext_lazy("Stop after: from 1 to 8760 hours.")


class RentForm(forms.Form):
    offering = forms.ChoiceField(
        error_messages={
            "required": gettext_lazy("Choose what to rent."),
            "invalid_choice": gettext_lazy("That offering is no longer available; choose another."),
        }
    )
    image = forms.ChoiceField(
        error_messages={
            "required": gettext_lazy("Choose an image."),
            "invalid_choice": gettext_lazy("That image is no longer available; choose another."),
        }
    )
    billing = forms.ChoiceField(choices=BillingMode.choices, initial=BillingMode.HOURLY)
    name = forms.CharField(max_length=100, required=False, strip=True)
    ssh_keys = forms.MultipleChoiceField(required=False)
    disks = forms.MultipleChoiceField(
        required=False,
        error_messages={
            "invalid_choice": gettext_lazy("That disk is no longer free; choose another.")
        },
    )
    auto_recover = forms.BooleanField(required=False)
    no_mirrors = forms.BooleanField(required=False)  # ticked: without the academic mirrors
    region = forms.ChoiceField(
        required=False,
        error_messages={
            "invalid_choice": gettext_lazy("That region is no longer offered; choose another.")
        },
    )
    idle_stop = forms.BooleanField(required=False)
    idle_util_pct = forms.IntegerField(
        required=False,
        min_value=IDLE_UTIL_PCT_RANGE[0],
        max_value=IDLE_UTIL_PCT_RANGE[1],
        error_messages={"min_value": IDLE_UTIL_ERROR, "max_value": IDLE_UTIL_ERROR},
    )
    idle_minutes = forms.IntegerField(
        required=False,
        min_value=IDLE_MINUTES_RANGE[0],
        max_value=IDLE_MINUTES_RANGE[1],
        error_messages={"min_value": IDLE_MINUTES_ERROR, "max_value": IDLE_MINUTES_ERROR},
    )
    stop_after_hours = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_STOP_AFTER_HOURS,
        error_messages={"min_value": STOP_AFTER_ERROR, "max_value": STOP_AFTER_ERROR},
    )
    token = forms.RegexField(regex=r"^[A-Za-z0-9_-]{16,64}$")

    def __init__(
        self,
        *args: Any,
        offerings: list[Offering],
        images: list[Image],
        keys: list[SshKey],
        disks: Sequence[Disk] = (),
        regions: Sequence[Region] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._offer("disks", [(d.id, d.name) for d in disks])
        self._offer(
            "region", [("", ""), *((r.name, localized(r, "display_name")) for r in regions)]
        )
        self._offer("offering", [(o.id, localized(o, "name")) for o in offerings])
        self._offer("image", [(i.id, localized(i, "name")) for i in images])
        self._offer("ssh_keys", [(k.id, k.name) for k in keys])

    def _offer(self, name: str, choices: list[tuple[str, str]]) -> None:
        field = self.fields[name]
        assert isinstance(field, forms.ChoiceField)  # the choice fields declared above
        field.choices = choices


def _auto_recover(offerings: list[Offering], data: dict[str, Any]) -> bool | None:
    """The console's choice applies to cloud GPUs; a whole node keeps the default (off)."""
    offering = next(o for o in offerings if o.id == data["offering"])
    return data["auto_recover"] if offering.kind == OfferingKind.CLOUD else None


def _default_offering(offerings: list[Offering], counts: dict[str, int], wallet: Wallet) -> str:
    """The cheapest offering that is free now and that the balance can start, in cash or in
    trial credit at its trial price (else the cheapest free one, else the first): a safe first
    choice, above all for trial credit."""
    free = sorted((o for o in offerings if counts.get(o.id)), key=lambda o: o.price_per_hour_fen)
    funds = runway_funds(wallet)
    affordable = [
        o
        for o in free
        if o.price_per_hour_fen <= funds.cash_fen
        or (
            o.trial_price_per_hour_fen is not None and o.trial_price_per_hour_fen <= funds.trial_fen
        )
    ]
    candidates = affordable or free or offerings
    return candidates[0].id if candidates else ""


def _groups(
    offerings: list[Offering], counts: dict[str, int], pulls: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """Offerings by GPU model, in catalogue order."""
    groups: dict[str, dict[str, Any]] = {}
    for offering in offerings:
        group = groups.setdefault(offering.gpu_model_id, {"model": offering.gpu_model, "rows": []})
        group["rows"].append(
            {
                "offering": offering,
                "available": counts.get(offering.id, 0),
                "pulls": pulls.get(offering.id, {}),
            }
        )
    return list(groups.values())


def _pulls(offer: "_Offer") -> dict[str, dict[str, dict[str, Any]]]:
    """Per offering, per image: whether its first start is warm (the image is on a free node
    that fits) and the line that says so, or how much it pulls and for how long."""
    sizes = {image.id: image.size_bytes for image in offer.images}
    shown: dict[str, dict[str, dict[str, Any]]] = {}
    for offering_id, per_image in offer.warmth.items():
        shown[offering_id] = {}
        for image_id, seconds in per_image.items():
            if seconds == 0:
                text = _("Image ready: starts in seconds")
            else:
                text = _("First start pulls %(size)s GB (~%(seconds)s s)") % {
                    "size": f"{sizes[image_id] / 1e9:.0f}",
                    "seconds": seconds,
                }
            shown[offering_id][image_id] = {"warm": seconds == 0, "text": text}
    return shown


@dataclass
class _Offer:
    """What the rent page offers: the active catalogue with its live availability, and the
    user's balance, SSH keys and free cloud disks."""

    offerings: list[Offering]
    images: list[Image]
    wallet: Wallet
    counts: dict[str, int]
    keys: list[SshKey]
    disks: list[Disk]
    regions: list[Region]
    warmth: dict[str, dict[str, int]]  # offering -> image -> expected pull seconds (0: warm)


@dataclass
class _Shown:
    """The rent form as the page shows it: the choices, the order token (the idempotency key
    of the order it places), and why the last submission was refused, if it was."""

    chosen: dict[str, str]
    token: str
    selected_keys: list[str]
    selected_disks: list[str]
    error: str | None = None
    error_code: str = ""
    http_status: int = 200

    def refuse(self, error: str, *, status: int, code: str = "", new_token: bool = False) -> None:
        self.error, self.error_code, self.http_status = error, code, status
        if new_token:
            self.token = form_token()


@login_required
def rent(request: HttpRequest) -> HttpResponse:
    """Rent GPUs. A submitted form places its order once (a second submission of it finds the
    same order) and leads to the instance; a refused one comes back with the reason and the
    choices kept."""
    offer = _offer_for(request)
    if request.method != "POST":
        return _rent_page(request, offer, _form_new(request, offer))
    form = RentForm(
        request.POST,
        offerings=offer.offerings,
        images=offer.images,
        keys=offer.keys,
        disks=offer.disks,
        regions=offer.regions,
    )
    shown = _form_as_posted(request)
    if not form.is_valid():
        shown.refuse(_errors_of(form), status=400, new_token="token" in form.errors)
        return _rent_page(request, offer, shown)
    try:
        instance, created = _order_place(request, offer, form.cleaned_data)
    except IdempotencyConflict as conflict:
        # A stale copy of a form that already placed a different order.
        message = _(
            "This form was already used to place a different order. Check your "
            "instances, then submit again if you still want this one."
        )
        shown.refuse(message, status=conflict.status_code, new_token=True)
    except ServiceError as failure:
        # Nothing was ordered: the same token stays valid for the corrected order.
        shown.refuse(failure.message, status=failure.status_code, code=failure.code)
    else:
        return _ordered(request, instance, created=created)
    return _rent_page(request, offer, shown)


def _offer_for(request: HttpRequest) -> _Offer:
    offerings = list(Offering.objects.filter(active=True).select_related("gpu_model"))
    images = list(Image.objects.usable_by(request.user.tenant_id))  # type: ignore[union-attr]
    return _Offer(
        offerings=offerings,
        images=images,
        warmth=image_warmth(offerings, images),
        wallet=wallet_for_tenant(request.user.tenant_id),  # type: ignore[union-attr]
        counts=availability(offerings),
        keys=list(scope_to_user(SshKey.objects.all(), request.user, "user")),
        disks=free_disks(page_user(request)),
        regions=list(Region.objects.filter(active=True).order_by("name")),
    )


def _form_new(request: HttpRequest, offer: _Offer) -> _Shown:
    """A blank form: the offering asked for (?offering=) or a safe default, the first image,
    hourly billing, recovery on, every SSH key, no disk, and a new token."""
    wanted = request.GET.get("offering", "")
    chosen = {
        "offering": wanted
        if any(o.id == wanted for o in offer.offerings)
        else _default_offering(offer.offerings, offer.counts, offer.wallet),
        "image": offer.images[0].id if offer.images else "",
        "billing": BillingMode.HOURLY,
        "name": "",
        "auto_recover": "on",
        "region": "",
        **_idle_defaults(request),
        "stop_after_hours": "",
    }
    return _Shown(
        chosen=chosen,
        token=form_token(),
        selected_keys=[k.id for k in offer.keys],
        selected_disks=[],
    )


def _form_as_posted(request: HttpRequest) -> _Shown:
    """The submitted form, to show again as it was sent."""
    return _Shown(
        chosen={
            key: str(request.POST.get(key, ""))[:100]
            for key in (
                "offering",
                "image",
                "billing",
                "name",
                "auto_recover",
                "no_mirrors",
                "region",
                "idle_stop",
                "idle_util_pct",
                "idle_minutes",
                "stop_after_hours",
            )
        },
        token=str(request.POST.get("token", "")),
        selected_keys=request.POST.getlist("ssh_keys"),
        selected_disks=request.POST.getlist("disks"),
    )


def _idle_defaults(request: HttpRequest) -> dict[str, str]:
    """The rent form's idle auto-stop as the user's settings have it."""
    own = user_settings(request.user)  # type: ignore[arg-type]
    return {
        "idle_stop": "on" if own.idle_stop_enabled else "",
        "idle_util_pct": str(own.idle_stop_util_pct),
        "idle_minutes": str(own.idle_stop_minutes),
    }


def _idle_stop_chosen(request: HttpRequest, data: dict[str, Any]) -> IdleStop | None:
    """The form's idle auto-stop: off unless ticked; a value left empty is the user's default."""
    if not data["idle_stop"]:
        return None
    own = user_settings(request.user)  # type: ignore[arg-type]
    return IdleStop(
        util_pct=data["idle_util_pct"] or own.idle_stop_util_pct,
        minutes=data["idle_minutes"] or own.idle_stop_minutes,
    )


def _errors_of(form: RentForm) -> str:
    return " ".join(str(e) for errs in form.errors.values() for e in errs)


def _order_place(
    request: HttpRequest, offer: _Offer, data: dict[str, Any]
) -> tuple[Instance, bool]:
    """The order a valid form describes; its token makes it the same order when sent again."""
    return instance_order(
        user=page_user(request),
        offering_id=data["offering"],
        image_id=data["image"],
        name=data["name"],
        billing=data["billing"],
        ssh_keys=data["ssh_keys"],
        disks=data["disks"],
        auto_recover=_auto_recover(offer.offerings, data),
        region=data["region"],
        idle_stop=_idle_stop_chosen(request, data),
        stop_after_hours=data["stop_after_hours"],
        mirrors=not data["no_mirrors"],
        idempotency_key=ORDER_KEY_PREFIX + data["token"],
    )


def _ordered(request: HttpRequest, instance: Instance, *, created: bool) -> HttpResponse:
    """On to the instance's page, saying whether this submission placed the order."""
    if created:
        audit_request(request, "instance.ordered", instance, offering=instance.offering_id)
        messages.success(request, _("Instance “%(name)s” ordered.") % {"name": instance.name})
    else:
        messages.info(request, _("This order had already been placed; here is its instance."))
    return redirect("instances:detail", instance.pk)


def _trial_line(offering: Offering, promo_fen: int) -> str:
    """What the trial credit left buys of an offering at its trial price ("" without one)."""
    trial = offering.trial_price_per_hour_fen
    if trial is None:
        return ""
    minutes = trial_minutes(promo_fen, trial)
    if not minutes:
        return _("Trial price: %(price)s / hour") % {"price": format_fen(trial)}
    return _("Trial: %(promo)s buys %(hours)s h %(minutes)s min") % {
        "promo": format_fen(promo_fen),
        "hours": minutes // 60,
        "minutes": minutes % 60,
    }


def _rent_page(request: HttpRequest, offer: _Offer, shown: _Shown) -> HttpResponse:
    pulls = _pulls(offer)
    funds = runway_funds(offer.wallet)
    promo = funds.trial_fen
    # an hour as charged now (pay as you go: at the trial price while trial credit pays)
    now_of = {o.id: offering_price_now(o, promo) for o in offer.offerings}
    catalog = {
        o.id: {
            "name": localized(o, "name"),
            "hour": o.price_per_hour_fen,
            "now": now_of[o.id].fen,
            "after": now_of[o.id].after_fen,
            "month": o.price_per_month_fen,
            "trial_line": _trial_line(o, promo),
            # the trial credit starts it (an hour at its trial price): cash need not
            "trial_covers": o.trial_price_per_hour_fen is not None
            and promo >= o.trial_price_per_hour_fen,
            "available": offer.counts.get(o.id, 0),
            "pulls": pulls.get(o.id, {}),
        }
        for o in offer.offerings
    }
    groups = _groups(offer.offerings, offer.counts, pulls)
    for group in groups:
        for row in group["rows"]:
            trial = row["offering"].trial_price_per_hour_fen
            row["trial_minutes"] = trial_minutes(promo, trial) if trial is not None else 0
            row["now"] = now_of[row["offering"].id]
    context = {
        "active": "rent",
        "groups": groups,
        "spot_rates": preemption_rates(),
        "spot_grace_s": settings.SPOT_PREEMPT_GRACE_S,
        # trial credit pays only trial prices: what the balance covers at standard prices is cash
        "cash_fen": funds.cash_fen,
        "images": offer.images,
        "keys": offer.keys,
        "selected_keys": shown.selected_keys,
        "disks": offer.disks,
        "selected_disks": shown.selected_disks,
        "regions": offer.regions,
        "mirrors": mirrors_configured(),
        "wallet": offer.wallet,
        "chosen": shown.chosen,
        "selected": next((o for o in offer.offerings if o.id == shown.chosen["offering"]), None),
        "catalog": catalog,
        "now_of": now_of,
        "token": shown.token,
        "error": shown.error,
        "error_code": shown.error_code,
    }
    return render(request, "instances/rent.html", context, status=shown.http_status)


def _user_instances(request: HttpRequest) -> QuerySet[Instance]:
    return scope_to_user(Instance.objects.all(), request.user, "tenant").select_related(
        "offering__gpu_model", "node", "image", "stop_policy"
    )


def _status_labels() -> dict[str, str]:
    return {value: str(label) for value, label in InstanceStatus.choices}


@login_required
def instance_list(request: HttpRequest) -> HttpResponse:
    show_terminated = request.GET.get("view") == "terminated"
    # a cluster's ranks are listed on their cluster's page, a job's on its job's, with their
    # owner's actions
    rows = _user_instances(request).filter(holding__gang="", workload__isnull=True)
    rows = (
        rows.filter(status=S.TERMINATED) if show_terminated else rows.exclude(status=S.TERMINATED)
    )
    page = Paginator(rows, 50).get_page(request.GET.get("page"))
    return render(
        request,
        "instances/list.html",
        {
            "active": "instances",
            "page": page,
            "show_terminated": show_terminated,
            "status_labels": _status_labels(),
            "can_stop": CAN_STOP,
            "can_start": CAN_START,
        },
    )


def _metrics_json(instance: Instance) -> list[dict[str, Any]]:
    """instance_metrics with times as ISO text, as the metrics API returns them."""
    return [
        {
            **gpu,
            "samples": [{**s, "at": s["at"].isoformat()} for s in gpu["samples"]],
        }
        for gpu in instance_metrics(instance)
    ]


def price_now(instance: Instance) -> PriceNow:
    """What an hour of the instance is charged now (offering_price_now for its wallet; in
    no-GPU mode its offering's no-GPU price, from trial credit or cash alike)."""
    cpu_only = instance.offering.cpu_only_price_per_hour_fen
    if not instance.holding.gpus_attached and instance.billing == BillingMode.HOURLY and cpu_only:
        return PriceNow(fen=cpu_only)
    return offering_price_now(
        instance.offering,
        wallet_for_tenant(instance.tenant_id).promo_free_fen,
        billing=instance.billing,
    )


@login_required
def instance_detail(request: HttpRequest, pk: str) -> HttpResponse:
    instance = get_for_user(_user_instances(request), request.user, "tenant", pk)
    gang = gang_of(instance)
    # a multi-node job's rank is one of a gang too: its job is where it is acted on
    owner = workload_owner_link(instance)
    owned = bool(gang or owner)
    info = InstanceOutput(instance).data
    events = list(instance.events.order_by("at", "id"))
    return render(
        request,
        "instances/detail.html",
        {
            "active": "instances",
            "instance": instance,
            "info": info,
            "events": events,
            "metrics": _metrics_json(instance),
            "status_labels": _status_labels(),
            # one of a gang (a cluster's rank) stops, starts and terminates with it, there
            "gang_member": gang_hooks().member_link(instance) if gang and not owner else None,
            # one that runs a job's program starts and ends with its job, there
            "workload_owner": owner,
            "price_now": price_now(instance),
            "spot_grace_s": settings.SPOT_PREEMPT_GRACE_S,
            "mirrors": mirrors_configured(),
            "can_stop": not owned and instance.status in CAN_STOP,
            "can_start": not owned and instance.status in CAN_START,
            "no_gpu_price": instance.offering.cpu_only_price_per_hour_fen,
            "gpus_attached": instance.holding.gpus_attached,
            "can_terminate": not owned and instance.status != S.TERMINATED,
            "can_save_image": not owned and instance.status in SAVABLE,
            "can_clone": instance.status in CLONEABLE,
            "clone_token": form_token(),
            "transient": instance.status in TRANSIENT,
            "has_keys": scope_to_user(SshKey.objects.all(), request.user, "user").exists(),
            "no_sshd": settings.DEV_PODS_WITHOUT_SSHD,
            "disks": list(instance.disks.order_by("name")),
            "free_disks": free_disks(page_user(request)),
            "nas": nas_for_tenant(instance.tenant_id),
            "tz": timezone.get_current_timezone_name(),
            "gateway_ports": gateway_ports(instance),
            "new_share": new_share_take(request, instance),
            "can_change_ports": instance.status not in (S.TERMINATING, S.TERMINATED),
            "max_ports": MAX_PORTS,
            "idle_warning": instance.status == S.RUNNING
            and instance.stop_policy.idle_stop_due_at is not None,
            "can_change_stops": instance.status not in (S.TERMINATING, S.TERMINATED),
            "in_gang": bool(gang),
            "idle_defaults": user_settings(request.user),  # type: ignore[arg-type]
        },
    )


@login_required
def instance_terminal(request: HttpRequest, pk: str) -> HttpResponse:
    """The instance page's Terminal tab: a terminal emulator in the page, connected to the web
    terminal service (terminal/, at TERMINAL_URL), which says itself when there is no shell to
    open (a stopped instance, say)."""
    instance = get_for_user(_user_instances(request), request.user, "tenant", pk)
    return render(
        request,
        "instances/terminal.html",
        {
            "active": "instances",
            "instance": instance,
            "socket_url": f"{settings.TERMINAL_URL}/terminal/{instance.pk}/ws",
            "idle_minutes": settings.TERMINAL_IDLE_MINUTES,
            "status_labels": _status_labels(),
        },
    )


def _back(request: HttpRequest, instance: Instance) -> HttpResponse:
    """Back to where the action was taken (the list or the instance's page)."""
    return redirect_back(request, reverse("instances:detail", args=[instance.pk]))


def _act(
    request: HttpRequest, pk: str, service: Callable[..., object], done: str, audited: str
) -> HttpResponse:
    """Run the change; `audited` names it in the team's audit log when it is done."""
    instance = get_for_user(Instance.objects.all(), request.user, "tenant", pk)
    run_change(
        request,
        instance,
        lambda: audit_request(request, audited, service(instance_id=instance.pk)),
        done % {"name": instance.name},
    )
    return _back(request, instance)


@login_required
@require_POST
def instance_image_save_view(request: HttpRequest, pk: str) -> HttpResponse:
    """Save as image, from the instance page's form (its name; confirmed in the page)."""
    instance = get_for_user(Instance.objects.all(), request.user, "tenant", pk)
    name = str(request.POST.get("name", "")).strip()[:100]
    if not name:
        messages.error(request, _("Give the new image a name, then save again."))
        return _back(request, instance)
    saved: list[Saving] = []
    done = _(
        "Saving “%(instance)s” as the image “%(image)s”: it is listed here, ready to order once "
        "its status is Ready."
    ) % {"instance": instance.name, "image": name}
    user = page_user(request)
    if not run_change(
        request,
        instance,
        lambda: saved.append(image_save(user=user, instance=instance, name=name)),
        done,
    ):
        return _back(request, instance)
    audit_request(request, "image.saving", saved[0].image, instance=instance.pk)
    if saved[0].warning:
        messages.warning(request, saved[0].warning)
    return redirect("instances:images")


@login_required
def image_list(request: HttpRequest) -> HttpResponse:
    """The tenant's own images (saved or brought), with their status and size."""
    images = Image.objects.filter(
        tenant_id=page_user(request).tenant_id, deleted_at__isnull=True
    ).order_by("-created_at")
    return render(request, "instances/images.html", {"active": "instances", "images": images})


@login_required
@require_POST
def image_delete_view(request: HttpRequest, pk: str) -> HttpResponse:
    image = get_for_user(Image.objects.filter(deleted_at__isnull=True), request.user, "tenant", pk)
    if run_service(
        request,
        lambda: image_delete(image=image),
        _("The image “%(name)s” is deleted.") % {"name": image.name},
    ):
        audit_request(request, "image.deleted", image, name=image.name)
    return redirect("instances:images")


@login_required
@require_POST
def instance_stop_view(request: HttpRequest, pk: str) -> HttpResponse:
    return _act(
        request,
        pk,
        instance_stop,
        _("Stopping “%(name)s”: billing has stopped, the disk is kept."),
        "instance.stopped",
    )


@login_required
@require_POST
def instance_start_view(request: HttpRequest, pk: str) -> HttpResponse:
    """Start, with its GPUs; or with `gpus=0` posted, in no-GPU mode (instances.nogpu)."""
    if request.POST.get("gpus") == "0":
        return _act(
            request,
            pk,
            lambda instance_id: instance_start(instance_id=instance_id, gpus_attached=False),
            _("Starting “%(name)s” without GPUs (no-GPU mode)."),
            "instance.started",
        )
    return _act(request, pk, instance_start, _("Starting “%(name)s”."), "instance.started")


@login_required
@require_POST
def instance_clone_view(request: HttpRequest, pk: str) -> HttpResponse:
    """Clone (instances.clones), on to the clone's page; the page's token makes a form sent
    twice one order."""
    source = get_for_user(Instance.objects.all(), request.user, "tenant", pk)
    token = request.POST.get("token", "")
    made: list[tuple[Instance, bool]] = []

    def clone() -> None:
        made.append(
            instance_clone(
                user=page_user(request),
                source=source,
                idempotency_key=CLONE_KEY_PREFIX + token if token else "",
            )
        )

    if not run_change(request, source, clone, _("Cloning “%(name)s”.") % {"name": source.name}):
        return _back(request, source)
    instance, created = made[0]
    if created:
        audit_request(request, "instance.cloned", instance, source=source.pk)
    return redirect("instances:detail", instance.pk)


@login_required
@require_POST
def instance_terminate_view(request: HttpRequest, pk: str) -> HttpResponse:
    if request.POST.get("keep_disk") == "1":
        return _act(
            request,
            pk,
            lambda instance_id: instance_terminate(instance_id=instance_id, keep_disk=True),
            _("Terminating “%(name)s”: its disk is kept as a cloud disk."),
            "instance.terminated",
        )
    return _act(
        request,
        pk,
        instance_terminate,
        _("Terminating “%(name)s”: the instance and its disk are being deleted."),
        "instance.terminated",
    )


@login_required
@require_POST
def disk_attach_view(request: HttpRequest, pk: str) -> HttpResponse:
    """Attach a disk to an instance, from either page; `restart` is the user's confirmation."""
    instance = get_for_user(Instance.objects.all(), request.user, "tenant", pk)
    disk_id = str(request.POST.get("disk", ""))[:32]
    restart = request.POST.get("restart") == "1"
    run_change(
        request,
        instance,
        lambda: audit_request(
            request,
            "disk.attached",
            disk_attach(
                instance=instance, disk_id=disk_id, restart=restart, actor=page_user(request)
            ),
            instance=instance.pk,
        ),
        _("Disk attached to “%(name)s”.") % {"name": instance.name}
        + (" " + _("It restarts to mount it.") if restart else ""),
    )
    return _back_from_disks(request, instance)


@login_required
@require_POST
def disk_detach_view(request: HttpRequest, pk: str, disk: str) -> HttpResponse:
    instance = get_for_user(Instance.objects.all(), request.user, "tenant", pk)
    restart = request.POST.get("restart") == "1"
    run_change(
        request,
        instance,
        lambda: audit_request(
            request,
            "disk.detached",
            disk_detach(instance=instance, disk_id=disk, restart=restart, actor=page_user(request)),
            instance=instance.pk,
        ),
        _("Disk detached from “%(name)s”; its data is kept.") % {"name": instance.name},
    )
    return _back_from_disks(request, instance)


def _back_from_disks(request: HttpRequest, instance: Instance) -> HttpResponse:
    if request.POST.get("next") == "disks":
        return redirect("console:disks")
    return redirect(reverse("instances:detail", args=[instance.pk]) + "#disks")


def calculator(request: HttpRequest) -> HttpResponse:
    """The public cost calculator (open to anyone, signed in or not). Its Starverse column is a
    catalog offering chosen from the active ones, priced by the API as on Rent."""
    offerings = [
        {
            "key": o.slug or o.id,
            "name": localized(o, "name"),
            "hour": o.price_per_hour_fen,
            "month": o.price_per_month_fen,
        }
        for o in calculator_offerings()
    ]
    context = {"presets": presets_shown(), "offerings": offerings, "active": "calculator"}
    return render(request, "billing/calculator.html", context)


@login_required
@require_POST
def instance_schedule_view(request: HttpRequest, pk: str) -> HttpResponse:
    """The instance page's Automatic stop form: the idle auto-stop (ticked, with its values) and
    the scheduled stop (a local date and time, or empty for none)."""
    instance = get_for_user(Instance.objects.all(), request.user, "tenant", pk)

    def save() -> None:
        idle = None
        if request.POST.get("idle_stop") == "on":
            idle = idle_stop_clean(
                {
                    "util_pct": _whole(request.POST.get("idle_util_pct", "")),
                    "minutes": _whole(request.POST.get("idle_minutes", "")),
                }
            )
        instance_schedule_set(
            instance_id=instance.pk,
            user=page_user(request),
            idle_stop=idle,
            stop_at=_local_time(str(request.POST.get("stop_at", ""))),
        )

    run_change(
        request, instance, save, _("Automatic stop of “%(name)s” saved.") % {"name": instance.name}
    )
    return redirect(reverse("instances:detail", args=[instance.pk]) + "#auto-stop")


def _whole(text: Any) -> Any:
    """A form's number as an int, or the text itself (the service then names the field)."""
    try:
        return int(str(text).strip())
    except ValueError:
        return text


def _local_time(text: str) -> Any:
    """A datetime-local input in the user's time zone, or None when empty."""
    if not text.strip():
        return None
    parsed = parse_moment(text)
    if parsed is None:
        raise InvalidInput(_("stop_at: enter a date and time."), code="invalid_stop_at")
    return parsed


@login_required
@require_POST
def instance_keep_running_view(request: HttpRequest, pk: str) -> HttpResponse:
    return _act(
        request,
        pk,
        instance_keep_running,
        _("“%(name)s” keeps running: idle time counts again from now."),
        "instance.kept_running",
    )
