"""Every console page a user reaches fits a 1280 px window, in Chinese and in English, with
realistic long data: a long e-mail, instances, disks with long names (attached, and offered to a
stopped instance), a cluster and its ranks on nodes with long host names, an endpoint, a dataset
with a long directory, teams and their people, keys and tokens with long names. Measured as the
fleet pages are (test_fleet_fits.MEASURE), over the whole page with its top bar: no page scroll
sideways, no element past the window's right edge, no box that scrolls or clips its content
sideways, but those meant to (MEANT). One browser session per language, logged in once; the
data is made through the services."""

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from billing.onboarding import team_create
from compute.models import Offering
from datasets.models import PublicDataset
from devstack.kube import KubeEmulator
from devstack.kube.fleet import build_fleet
from instances.lifecycle import instance_order, instance_stop
from instances.models import Instance
from instances.provisioning import converge
from jobs.services import JobRequest, job_submit
from starverse.accounts.teams import invitation_accept, invitation_create, invitation_token
from tests.conftest import KUBE_TIMINGS
from tests.e2e.steps import MEASURE, log_in, platform_on
from tests.factories import (
    CLOUD_GPU,
    IMAGE,
    converge_until,
    fund,
    make_cluster,
    make_disk,
    make_endpoint,
    make_ssh_key,
    make_token,
    make_user,
)

EMAIL = "margarethe.oyelaran-vasquez@computational-linguistics.research.example.edu.cn"
# Node names as a data centre writes them: rack, node, the cluster's domain.
HOSTS = [f"gpu-h100-rack01-node{n:02}.cluster.local" for n in range(1, 5)]
DISKS = [
    "llama-3-70b-pretraining-checkpoints-2026-11-full-shard",
    "imagenet-22k-preprocessed-webdataset-shards-train",
    "scratch-space-for-hyperparameter-sweep-results-v2",
]
JOB = "llama-3-70b-instruction-tuning-chinese-corpora-lr2e-5-resume"
# A command as people paste them: one long line of flags, then more lines.
JOB_COMMAND = (
    "torchrun --nproc_per_node=1 train.py --model /public/models/llama-3-70b-instruct "
    "--data /nas/datasets/chinese-instruction-corpora-2026-11-deduplicated-shards "
    '--resume-from "$STARVERSE_CHECKPOINT_DIR" --save-every 500 --lr 2e-5\n'
    "python evaluate.py --checkpoint-dir $STARVERSE_CHECKPOINT_DIR --report /nas/reports"
)
INSTANCES = [
    "qwen2-72b-sft-run-2026-12-02-lr3e-5-warmup",
    "stable-diffusion-xl-finetune-portraits-experiment",
]
# Boxes MEASURE reads as clipped that are meant to be: a command scrolls sideways in its own box
# beside its Copy button (it stays whole, as it is copied and run), and a text cut short with an
# ellipsis whose whole text is its title, when at least SHORTENED_MIN_PX of it shows (the
# topbar's page title and e-mail).
SHORTENED_MIN_PX = 160
# A narrower window, for the pages whose tables carry forms (a disk's attach, grow and delete).
NARROW_PX = 960
NARROW_PAGES = ("disks", "instances", "billing", "team")
MEANT = """(least) => {
  const name = (e) => `${e.tagName.toLowerCase()}#${e.id}.${e.className}`;
  const commands = [...document.querySelectorAll(".command-line")].filter(
    (e) => getComputedStyle(e).overflowX === "auto");
  const shortened = [...document.querySelectorAll("*")].filter((e) => {
    const titled = e.closest("[title]");
    return getComputedStyle(e).textOverflow === "ellipsis" && titled
      && titled.title.trim() === e.textContent.trim() && e.clientWidth >= least;
  });
  return [...commands, ...shortened].map(name);
}"""


@pytest.fixture
def long_fleet(settings, tmp_path, transactional_db) -> Iterator[KubeEmulator]:
    """The platform on four H100 nodes with long host names (two for a cluster, two for the
    instances and the endpoint), the catalog seeded."""
    nodes = [
        dataclasses.replace(spec, name=name)
        for spec, name in zip(build_fleet({"h100": 4}), HOSTS, strict=True)
    ]
    emulator = KubeEmulator(nodes=nodes, **KUBE_TIMINGS).start()
    settings.MAX_RUNNING_GPUS = 64
    with platform_on(emulator, settings, tmp_path):
        yield emulator


def _console(lang: str) -> dict[str, Any]:
    """A user with long names everywhere, and the pages they reach with data on them."""
    user = make_user(EMAIL.replace("@", f"-{lang}@"))
    fund(user, 5_000_000, key="plenty")
    disks = [make_disk(user, name=name, size_gb=2048) for name in DISKS]
    make_disk(user, name="unattached-evaluation-results-archive-2026", size_gb=500)
    offering = Offering.objects.get(name=CLOUD_GPU)
    instances = []
    for name, disk in zip(INSTANCES, disks, strict=False):
        instance, _created = instance_order(
            user=user, offering_id=offering.id, image_id=IMAGE, name=name, disks=[disk.id]
        )
        assert converge_until(converge.provision, instance.id) == "running"
        instances.append(instance)
    instance_stop(instance_id=instances[1].id)  # a stopped one: the Disks page offers it
    assert converge_until(converge.stop, instances[1].id) == "stopped"
    cluster = make_cluster(
        user, node_count=2, name="megatron-gpt-175b-pretraining-cluster-2026", template="deepspeed"
    )
    ranks = Instance.objects.filter(cluster_rank__cluster=cluster)
    assert {rank.status for rank in ranks} == {"running"}  # its tasks ran after the order
    endpoint = make_endpoint(user, name="qwen2-72b-instruct-internal-chat-assistant")
    job, _created = job_submit(
        user=user,
        request=JobRequest(
            offering_id=offering.id,
            image_id=IMAGE,
            name=JOB,
            command=JOB_COMMAND,
            env={"WANDB_PROJECT": "llama-3-70b-instruction-tuning-chinese-corpora-" * 3},
            checkpoint_dir="/nas/checkpoints/llama-3-70b-instruction-tuning-chinese-corpora",
            nas=False,
        ),
    )
    PublicDataset.objects.create(
        id="the-pile-deduplicated-uncopyrighted-en-2026-11",
        name="The Pile, deduplicated and without copyrighted sources (English, 2026-11)",
        kind="dataset",
        size_bytes=825 * 2**30,
        licence="MIT",
        directory="the-pile-deduplicated-uncopyrighted-en-2026-11-parquet",
    )
    for name in ("laptop-thinkpad-x1-carbon-gen11-lab-office", "workstation-a6000-home"):
        make_ssh_key(user, name=name)
    for name in ("github-actions-nightly-evaluation-pipeline", "jupyterhub-spawner"):
        make_token(user, name=name)
    team = team_create(user=user, name="Computational Linguistics and Speech Processing Lab")
    for n in range(3):
        member = make_user(f"postdoc{n}-{lang}.with-a-long-address@speech.example.edu.cn")
        invitation = invitation_create(actor=user, team=team, email=member.email, role="member")
        invitation_accept(user=member, token=invitation_token(invitation))
    invitation_create(
        actor=user,
        team=team,
        email=f"visiting-{lang}.researcher@university.example.ac.uk",
        role="member",
    )
    return {
        "user": user,
        "pages": {
            "dashboard": "/console/",
            "instances": "/console/instances/",
            "instance": f"/console/instances/{instances[0].id}/",
            "rent": "/console/rent/",
            "clusters": "/console/clusters/",
            "cluster": f"/console/clusters/{cluster.id}/",
            "new cluster": "/console/clusters/new/",
            "planner": "/clusters/plan/",
            "jobs": "/console/jobs/",
            "job": f"/console/jobs/{job.id}/",
            "new job": "/console/jobs/new/",
            "endpoints": "/console/endpoints/",
            "new endpoint": "/console/endpoints/new/",
            "endpoint": f"/console/endpoints/{endpoint.id}/",
            "disks": "/console/disks/",
            "datasets": "/console/datasets/",
            "billing": "/billing/",
            "calculator": "/billing/calculator/",
            "teams": "/teams/",
            "team": f"/teams/{team.pk}/",
            "team audit": f"/teams/{team.pk}/audit/",
            "settings": "/accounts/settings/",
            "security": "/accounts/security/",
            "SSH keys": "/accounts/ssh-keys/",
            "API tokens": "/accounts/tokens/",
        },
    }


def _misfits(page: Page, root: str = "body") -> dict[str, Any]:
    """What does not fit on the page (or under `root`), as MEASURE reads it, less the command
    boxes' own sideways scroll."""
    measured = page.evaluate(MEASURE, root)
    meant = page.evaluate(MEANT, SHORTENED_MIN_PX)
    clipped = [c for c in measured["clipped"] if c.rsplit(" ", 3)[0] not in meant]
    wrong = {k: measured[k] for k in ("wide",) if measured[k]}
    if clipped:
        wrong["clipped"] = clipped
    if measured["scroll"] > measured["inner"]:
        wrong["scroll"] = measured["scroll"]
    return wrong


def test_every_console_page_fits_1280_px(page: Page, lang, live_server, long_fleet):
    base = live_server.url
    console = _console(lang)
    log_in(page, base, console["user"].email)
    misfits = {}
    for name, path in console["pages"].items():
        page.goto(f"{base}{path}")
        expect(page.locator("main h1")).to_be_visible()
        wrong = _misfits(page)
        if wrong:
            misfits[name] = wrong
    # Below 1,024 px (a laptop's split screen) tables of actions stack rather than scroll.
    page.set_viewport_size({"width": NARROW_PX, "height": 900})
    for name in NARROW_PAGES:
        page.goto(f"{base}{console['pages'][name]}")
        expect(page.locator("main h1")).to_be_visible()
        # (the side navigation is a strip across the top there, which scrolls in its own box)
        wrong = _misfits(page, "#content")
        if wrong:
            misfits[f"{name} at {NARROW_PX} px"] = wrong
    assert misfits == {}
