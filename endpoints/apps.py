from django.apps import AppConfig


class EndpointsConfig(AppConfig):
    name = "endpoints"
    verbose_name = "Inference endpoints"

    def ready(self) -> None:
        # usage, budgets and selectors read models: imported once the apps are loaded
        from billing.usage import resource_namer_register
        from endpoints.metering import meter_hooks_install
        from endpoints.selectors import endpoints_hourly_fen, endpoints_named, endpoints_ordered
        from instances.budgets import Spender, budget_spender_register

        resource_namer_register("endpoints", endpoints_named)
        budget_spender_register(
            "endpoints", Spender(ordered=endpoints_ordered, hourly_fen=endpoints_hourly_fen)
        )
        meter_hooks_install()
