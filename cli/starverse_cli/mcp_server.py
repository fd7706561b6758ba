"""`starverse mcp`: a Model Context Protocol server over stdio, for coding agents, on the
maintained `mcp` SDK (the one module of the CLI that needs a package: `pip install
'starverse-cli[mcp]'`; main imports it only when the command runs). Every tool calls the REST
API with the profile's token, as the other commands do.

Tools: offerings (and prices), quote (a dry run of an instance order), rent, instances (list),
stop, terminate, submit_job, job_logs. The spending ones (rent, submit_job) refuse to run with
a token that has no spending cap (GET /me's token_caps), and quote first: the order's dry run
(`dry_run: true`), whose refusal is answered instead of ordering; what they answer includes the
quote."""

import json
import uuid
from typing import Any

from mcp.server.mcpserver import MCPServer

from starverse_cli.client import ApiError, Client

NEEDS_CAP = (
    "Refused: this token has no spending cap. A tool that spends without a person watching "
    "needs one: make a token with max_spend_fen or max_spend_per_day_fen (console: Account → "
    "API tokens) and log in with it (starverse login)."
)
LOG_TAIL_MAX = 2000


class Tools:
    """What the tools do, over one API client (kept apart from the server to be read alone)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def offerings(self) -> list[dict[str, Any]]:
        rows = self.client.list_all("offerings")
        keep = ("id", "name", "gpu_count", "price_per_hour_fen", "trial_price_per_hour_fen")
        return [{key: row.get(key) for key in keep if key in row} for row in rows]

    def quote(self, body: dict[str, Any], path: str = "instances") -> dict[str, Any]:
        answer: dict[str, Any] = self.client.post(path, {**body, "dry_run": True})
        return answer

    def spend(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """An order that spends: only with a capped token, and quoted first."""
        caps = (self.client.get("me") or {}).get("token_caps") or {}
        if caps.get("max_spend_fen") is None and caps.get("max_spend_per_day_fen") is None:
            return {"refused": NEEDS_CAP}
        quoted = self.quote(body, path)
        if quoted.get("refusal"):
            return {"quote": quoted.get("quote"), "refused": quoted["refusal"]}
        made = self.client.post(path, body, headers={"Idempotency-Key": str(uuid.uuid4())})
        return {"quote": quoted.get("quote"), path.rstrip("s"): made}

    def instances(self) -> list[dict[str, Any]]:
        keep = ("id", "name", "status", "offering", "price_per_hour_fen", "queue_position")
        rows = self.client.list_all("instances")
        return [{key: row.get(key) for key in keep if key in row} for row in rows]

    def job_logs(self, job_id: str, tail: int) -> str:
        query = {"tail": max(1, min(tail, LOG_TAIL_MAX))}
        return b"".join(self.client.stream(f"jobs/{job_id}/logs", query)).decode("utf-8", "replace")


def _answer(call: Any) -> str:
    """A tool's answer as JSON text; an API error as its body, for the agent to read."""
    try:
        return json.dumps(call(), ensure_ascii=False, default=str)
    except ApiError as error:
        return json.dumps(
            {"error": {"status": error.status, "code": error.code, "detail": error.detail}},
            ensure_ascii=False,
        )


def build_server(client: Client) -> MCPServer:
    """The server and its tools over `client`."""
    tools = Tools(client)
    server = MCPServer(
        "starverse",
        instructions="Rent GPUs on Starverse: quote before you rent; prices are in fen "
        "(1/100 yuan) an hour. Spending tools need a token with a spending cap.",
    )

    @server.tool()
    def offerings() -> str:
        """What can be rented: each offering's id, name, GPUs and price per hour (fen)."""
        return _answer(tools.offerings)

    @server.tool()
    def quote(offering: str, image: str) -> str:
        """What renting an instance would cost and whether it would be taken, ordering
        nothing: {quote: {price_per_hour_fen, paid_by, runway_hours, queue_position,
        expected_start_s}, refusal}."""
        return _answer(lambda: tools.quote({"offering": offering, "image": image}))

    @server.tool()
    def rent(offering: str, image: str, name: str = "") -> str:
        """Rent an instance (quoted first; refused without a capped token)."""
        body = {"offering": offering, "image": image, **({"name": name} if name else {})}
        return _answer(lambda: tools.spend("instances", body))

    @server.tool()
    def instances() -> str:
        """Your instances: id, name, status, price."""
        return _answer(tools.instances)

    @server.tool()
    def stop(instance_id: str) -> str:
        """Stop an instance: billing stops, its disk is kept."""
        return _answer(lambda: client.post(f"instances/{instance_id}/stop"))

    @server.tool()
    def terminate(instance_id: str) -> str:
        """Terminate an instance: it and its own disk are gone, billing ends."""
        return _answer(lambda: client.delete(f"instances/{instance_id}"))

    @server.tool()
    def submit_job(offering: str, image: str, command: str, name: str = "") -> str:
        """Submit a batch job that runs `command` to its end (quoted first; refused without a
        capped token)."""
        body = {"offering": offering, "image": image, "command": command}
        return _answer(lambda: tools.spend("jobs", {**body, **({"name": name} if name else {})}))

    @server.tool()
    def job_logs(job_id: str, tail: int = 200) -> str:
        """The last `tail` lines of a job's log (rank 0)."""
        return _answer(lambda: tools.job_logs(job_id, tail))

    return server


def serve(client: Client) -> None:
    """Serve over stdio until the client closes it."""
    build_server(client).run("stdio")
