"""Development gateway: a stand-in, on one machine, for the production proxy in front of the
instances' HTTP ports (deploy/k8s/gateway.yaml). ``make run`` and the tests use it with the
kube emulator; production uses Envoy Gateway.
"""

from .proxy import DevGateway, routes_table

__all__ = ["DevGateway", "routes_table"]
