"""The public parallelism planner page (/clusters/plan/): a form read from the query string, so
it works without JavaScript and a result is a link; the same planner as POST
/api/v1/clusters/plan (clusters.planner)."""

from decimal import Decimal
from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.translation import gettext_lazy as _

from clusters.planner import PRESETS, GpuChoice, PlanInputError, gpu_models, plan, plan_inputs
from starverse.core.errors import ServiceError

DEFAULT_PRESET = "llama-7b"
DEFAULT_GPU = "h100-80g"


class PlanForm(forms.Form):
    """The planner's inputs; the model's fields left empty come from the preset."""

    preset = forms.ChoiceField(label=_("Preset"), required=False)
    params_b = forms.DecimalField(
        label=_("Parameters (billions)"),
        required=False,
        min_value=Decimal("0.001"),
        max_value=Decimal("100000"),
        decimal_places=3,
    )
    num_layers = forms.IntegerField(label=_("Layers"), required=False, min_value=1, max_value=1000)
    hidden_size = forms.IntegerField(
        label=_("Hidden size"), required=False, min_value=64, max_value=1_000_000
    )
    num_attention_heads = forms.IntegerField(
        label=_("Attention heads"), required=False, min_value=1, max_value=10_000
    )
    seq_length = forms.IntegerField(
        label=_("Sequence length"), required=False, min_value=1, max_value=10_000_000
    )
    micro_batch_size = forms.IntegerField(
        label=_("Micro-batch size"), required=False, min_value=1, max_value=10_000
    )
    gpu_model = forms.ChoiceField(label=_("GPU model"))
    node_count = forms.IntegerField(label=_("Nodes"), min_value=1)

    def __init__(self, *args: Any, gpus: dict[str, GpuChoice], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        preset = self.fields["preset"]
        gpu_model = self.fields["gpu_model"]
        assert isinstance(preset, forms.ChoiceField) and isinstance(gpu_model, forms.ChoiceField)
        preset.choices = [("", "—")] + [(key, preset["title"]) for key, preset in PRESETS.items()]
        gpu_model.choices = [
            (key, f"{choice.name} · {choice.memory_gb} GB × {choice.per_node}")
            for key, choice in gpus.items()
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        try:
            data["inputs"] = plan_inputs(data)
        except PlanInputError as error:
            for name, text in error.errors.items():
                self.add_error(name if name in self.fields else None, text)
        return data


def _initial(preset: str, gpus: dict[str, GpuChoice]) -> dict[str, Any]:
    shape = {key: value for key, value in PRESETS[preset].items() if key != "title"}
    gpu = DEFAULT_GPU if DEFAULT_GPU in gpus else next(iter(gpus), "")
    return {"preset": preset, **shape, "gpu_model": gpu, "node_count": 1}


def plan_page(request: HttpRequest) -> HttpResponse:
    """Public: open to anyone, signed in or not. An empty query plans the first preset; a
    query with only `preset` (the preset links) fills the form with it."""
    gpus = gpu_models()
    query = {key: value for key, value in request.GET.items() if value != ""}
    preset = query.get("preset", DEFAULT_PRESET)
    if set(query) <= {"preset", "gpu_model", "node_count"} and preset in PRESETS:
        query = {**_initial(preset, gpus), **query}
    form = PlanForm(query, gpus=gpus)
    result, refusal, order = None, None, None
    if form.is_valid():
        try:
            result = plan(*form.cleaned_data["inputs"]).as_dict()
        except ServiceError as error:
            refusal = error.message
        else:
            order = _order_url(result, gpus[form.cleaned_data["gpu_model"]].offering)
    return render(
        request,
        "clusters/plan.html",
        {
            "form": form,
            "presets": PRESETS,
            "result": result,
            "refusal": refusal,
            "order_url": order,
            "active": "planner",
        },
    )


def _order_url(result: dict[str, Any], offering: str | None) -> str | None:
    """Where the plan is ordered: the cluster order form filled with the GPU model's whole-node
    offering, the node count and the planned sizes; for one node, Rent with that offering. None
    when the GPU model has no whole-node offering."""
    if offering is None:
        return None
    if result["node_count"] < 2:
        return reverse("instances:rent") + "?" + urlencode({"offering": offering})
    query = {
        "offering": offering,
        "node_count": result["node_count"],
        "tensor_parallel": result["tensor_parallel"],
        "pipeline_parallel": result["pipeline_parallel"],
    }
    return reverse("clusters:new") + "?" + urlencode(query)
