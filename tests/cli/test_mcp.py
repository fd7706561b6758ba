"""`starverse mcp` against a live server, driven by the MCP SDK's own client (stdio_client and
ClientSession spawn `python -m starverse_cli mcp` as an agent's host does): it lists its tools,
answers offerings and a quote that orders nothing, rents and submits a job through a capped
token (each quoted first), refuses the order past the cap with the API's `token_cap`, refuses
to spend at all with an uncapped token, lists, terminates, and reads a job's log."""

import json
import sys
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

from compute.models import Offering
from instances.models import Instance
from jobs.models import Job
from starverse.accounts.services import TokenCaps, token_create
from tests.cli.live import REPO, Cli
from tests.factories import fund, make_user

OFFERING = "1× RTX 4090 24GB"  # not a premium model: no trial limit
TOOLS = {"offerings", "quote", "rent", "instances", "stop", "terminate", "submit_job", "job_logs"}


def _text(result: Any) -> Any:
    assert not result.is_error, result
    return json.loads(result.content[0].text)


async def _session_run(env: dict[str, str], steps: Any) -> Any:
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "starverse_cli", "mcp"], env=env, cwd=str(REPO)
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return await steps(session)


def _serve(cli: Cli, token: str, steps: Any) -> Any:
    env = {**cli.env, "STARVERSE_TOKEN": token}
    return anyio.run(_session_run, env, steps)


def test_an_agent_quotes_rents_and_is_capped_through_starverse_mcp(
    live_server, transactional_db, catalog, tmp_path
):
    user = make_user()
    fund(user, 10_000_000)
    offering = Offering.objects.get(name=OFFERING)
    hour = offering.price_per_hour_fen
    _capped, capped = token_create(
        user=user, name="agent", caps=TokenCaps(max_spend_fen=hour * 2 + hour // 2)
    )
    _open, uncapped = token_create(user=user, name="open")
    cli = Cli(tmp_path / "home", live_server.url)
    order = {"offering": offering.id, "image": "pytorch-2.1"}

    async def agent(session: ClientSession) -> dict[str, Any]:
        names = {tool.name for tool in (await session.list_tools()).tools}
        seen: dict[str, Any] = {"tools": names}
        seen["offerings"] = _text(await session.call_tool("offerings", {}))
        seen["quote"] = _text(await session.call_tool("quote", order))
        seen["rent"] = _text(await session.call_tool("rent", {**order, "name": "a"}))
        job = {**order, "command": "python train.py"}
        seen["job"] = _text(await session.call_tool("submit_job", job))
        seen["past_cap"] = _text(await session.call_tool("rent", order))
        seen["instances"] = _text(await session.call_tool("instances", {}))
        job_id = seen["job"]["job"]["id"]
        seen["logs"] = await session.call_tool("job_logs", {"job_id": job_id, "tail": 10})
        instance = seen["rent"]["instance"]["id"]
        seen["terminated"] = _text(await session.call_tool("terminate", {"instance_id": instance}))
        return seen

    seen = _serve(cli, capped, agent)

    assert seen["tools"] == TOOLS
    assert offering.id in {row["id"] for row in seen["offerings"]}
    assert seen["quote"]["refusal"] is None
    assert seen["quote"]["quote"]["price_per_hour_fen"] == hour
    assert seen["rent"]["quote"]["price_per_hour_fen"] == hour
    assert seen["rent"]["instance"]["name"] == "a"
    assert seen["past_cap"]["refused"]["code"] == "token_cap"
    assert seen["past_cap"]["refused"]["status"] == 402
    listed = {row["id"] for row in seen["instances"]}
    assert seen["rent"]["instance"]["id"] in listed
    assert not seen["logs"].is_error
    assert seen["terminated"]["status"] in ("terminating", "terminated")  # tasks run eagerly
    assert Job.objects.filter(tenant=user.tenant).count() == 1
    # the rented instance and the job's rank: nothing more, nothing for the quote
    assert Instance.objects.filter(tenant=user.tenant).count() == 2

    async def spender(session: ClientSession) -> Any:
        return _text(await session.call_tool("rent", order))

    refused = _serve(cli, uncapped, spender)
    assert refused["refused"].startswith("Refused: this token has no spending cap.")
    assert Instance.objects.filter(tenant=user.tenant).count() == 2
