"""Address allocation in the Kubernetes API emulator (a development stand-in): service
cluster IPs (10.96.0.0/16), node ports (30000-32767), load-balancer IPs and pod IPs."""

from __future__ import annotations

import ipaddress
import random
from typing import Any

from .errors import ApiError, invalid, invalid_value
from .resources import SERVICES
from .store import Store

SERVICE_NET = ipaddress.ip_network("10.96.0.0/16")
NODE_PORTS = range(30000, 32768)
LB_NET = ipaddress.ip_network("172.18.255.0/24")


class Allocator:
    def __init__(self, store: Store, seed: int | None = None) -> None:
        self.store = store
        self._random = random.Random(seed)

    def _services(self, exclude_uid: str) -> list[dict[str, Any]]:
        return [s for s in self.store.items(SERVICES) if s["metadata"].get("uid") != exclude_uid]

    def assign_service(self, svc: dict[str, Any], old: dict[str, Any] | None) -> None:
        """Fill clusterIP(s), nodePorts and the load-balancer status; 422 on collisions."""
        spec = svc["spec"]
        others = self._services(svc["metadata"].get("uid", ""))
        old_spec = (old or {}).get("spec") or {}
        if spec.get("type") == "ExternalName":
            spec.pop("clusterIP", None)
            spec.pop("clusterIPs", None)
        elif spec.get("clusterIP") == "None":
            spec["clusterIPs"] = ["None"]
        else:
            wanted = self._cluster_ip(svc, others, old_spec)
            spec["clusterIP"] = wanted
            spec["clusterIPs"] = [wanted]
        self._assign_node_ports(svc, others, old_spec)
        if spec.get("type") == "LoadBalancer":
            status = svc.setdefault("status", {})
            ingress = ((old or {}).get("status") or {}).get("loadBalancer", {}).get("ingress")
            status["loadBalancer"] = {"ingress": ingress or self._free_ingress(others)}
        else:
            svc["status"] = {"loadBalancer": {}}

    def _cluster_ip(
        self, svc: dict[str, Any], others: list[dict[str, Any]], old_spec: dict[str, Any]
    ) -> str | None:
        """The address asked for (checked: in range, not taken), the one the service had, or
        the first free one past the ten reserved at the start of the range."""
        used_ips = {s["spec"].get("clusterIP") for s in others}
        wanted = svc["spec"].get("clusterIP") or old_spec.get("clusterIP")
        if wanted and wanted != old_spec.get("clusterIP"):
            try:
                address = ipaddress.ip_address(wanted)
            except ValueError:
                address = None
            if address is None or address not in SERVICE_NET:
                raise _cluster_ip_refused(
                    svc,
                    wanted,
                    f"the provided IP ({wanted}) is not in the valid range. The range of valid "
                    f"IPs is {SERVICE_NET}",
                )
            if wanted in used_ips:
                raise _cluster_ip_refused(svc, wanted, "provided IP is already allocated")
        if not wanted:
            for host in SERVICE_NET.hosts():
                if int(host) - int(SERVICE_NET.network_address) < 10:
                    continue
                if str(host) not in used_ips:
                    return str(host)
        return wanted

    @staticmethod
    def _free_ingress(others: list[dict[str, Any]]) -> list[dict[str, str]]:
        used = {
            i.get("ip")
            for s in others
            for i in ((s.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        }
        free = next(str(h) for h in LB_NET.hosts() if str(h) not in used)
        return [{"ip": free, "ipMode": "VIP"}]

    def _assign_node_ports(
        self, svc: dict[str, Any], others: list[dict[str, Any]], old_spec: dict[str, Any]
    ) -> None:
        spec = svc["spec"]
        ports = spec.get("ports") or []
        if spec.get("type") not in ("NodePort", "LoadBalancer"):
            for port in ports:
                if isinstance(port, dict):
                    port.pop("nodePort", None)
            return
        used = {p.get("nodePort") for s in others for p in s["spec"].get("ports") or []}
        previous = {
            (p.get("port"), p.get("protocol", "TCP")): p.get("nodePort")
            for p in old_spec.get("ports") or []
            if isinstance(p, dict)
        }
        for index, port in enumerate(ports):
            if not isinstance(port, dict):
                continue
            wanted = port.get("nodePort") or previous.get(
                (port.get("port"), port.get("protocol", "TCP"))
            )
            if wanted and wanted in used:
                raise invalid(
                    "Service",
                    "",
                    svc["metadata"].get("name", ""),
                    [
                        invalid_value(
                            f"spec.ports[{index}].nodePort",
                            wanted,
                            "provided port is already allocated",
                        )
                    ],
                )
            if not wanted:
                free = [p for p in NODE_PORTS if p not in used]
                wanted = self._random.choice(free)
            port["nodePort"] = wanted
            used.add(wanted)


def _cluster_ip_refused(svc: dict[str, Any], wanted: str, why: str) -> ApiError:
    return invalid(
        "Service",
        "",
        svc["metadata"].get("name", ""),
        [invalid_value("spec.clusterIPs", [wanted], f"failed to allocate IP {wanted}: {why}")],
    )
