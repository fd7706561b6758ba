"""What a member may use in a team, and what they lose when removed or demoted: the gateway,
share links, the terminal and SSH access follow the role (a member their own instances, owners
and admins all of the team's, the billing role none), read at each use; a removal or a demotion
revokes, in its own transaction, the share links and endpoint keys the person may no longer
use and renders the access Secrets of the instances they ordered without their keys, and the
owner is told what was taken."""

import base64
from urllib.parse import urlsplit

import pytest
from django.http import Http404
from django.test import Client

from endpoints.gateway import endpoint_check
from endpoints.manifests import endpoint_host
from endpoints.models import EndpointKey
from endpoints.services import key_create
from instances.gateway import gateway_check, gateway_login_target, instance_ports_set, share_create
from instances.models import Instance, PortShare
from instances.terminals import terminal_target
from starverse.accounts.models import AuditEvent, Membership
from starverse.accounts.services import ssh_key_add
from starverse.core import kube
from starverse.core.errors import NotFound
from teams.services import Revoked, membership_remove, membership_role_set
from tests.factories import SSH_KEYS, make_endpoint, make_instance, make_user
from tests.teams.test_team_changes import acting, console
from tests.teams.test_teams import fund_team, join

KEY_A, KEY_B = (key["public_key"] for key in list(SSH_KEYS.values())[:2])


@pytest.fixture
def lab(catalog, django_capture_on_commit_callbacks):
    """A funded team of four: its owner, an admin, ana (a member) and bo (a member), with a
    running instance each of ana and bo serving port 6006; ana has a key."""
    from billing.onboarding import team_create

    owner, admin, ana, bo = (make_user() for _ in range(4))
    team = team_create(user=owner, name="Vision lab")
    join(team, owner, admin, role="admin")
    join(team, owner, ana)
    join(team, owner, bo)
    fund_team(team, 10_000_000)
    with django_capture_on_commit_callbacks(execute=True):
        ssh_key_add(user=ana, name="laptop", public_key=KEY_A)
    anas, bos = (
        instance_ports_set(
            instance_id=make_instance(acting(person, team, "member"), status="running").id,
            ports=[6006],
        )
        for person in (ana, bo)
    )
    for person in (owner, admin, ana, bo):
        person.refresh_from_db()  # their own account again, not acting for the team
    return team, owner, admin, ana, bo, anas, bos


def _authorized_keys(instance: Instance) -> str:
    secret = kube.read("Secret", instance.k8s_namespace, f"{instance.k8s_name}-access")
    assert secret is not None
    if "stringData" in secret:
        return str(secret["stringData"]["authorized_keys"])
    return base64.b64decode(secret["data"]["authorized_keys"]).decode()


def _gateway(person, instance, port=6006):
    """The gateway's answer to `person`'s browser after the console's log-in hop (404 when the
    console refuses the hop: nothing at this address)."""
    host = f"{instance.id.lower().replace('_', '-')}-{port}.localhost:8002"
    try:
        hop = urlsplit(gateway_login_target(user=person, next_url=f"http://{host}/"))
    except NotFound:  # the console's 404: nothing at this address
        return 404
    redeemed = gateway_check(host=host, uri=f"{hop.path}?{hop.query}", method="GET", cookie=None)
    assert redeemed.status == 302 and redeemed.cookie
    return gateway_check(host=host, uri="/", method="GET", cookie=redeemed.cookie).status


def _share_status(url: str) -> int:
    link = urlsplit(url)
    redeemed = gateway_check(
        host=link.netloc, uri=f"{link.path}?{link.query}", method="GET", cookie=None
    )
    if redeemed.status != 302 or not redeemed.cookie:
        return redeemed.status
    return gateway_check(host=link.netloc, uri="/", method="GET", cookie=redeemed.cookie).status


def _terminal(person, instance) -> bool:
    try:
        terminal_target(user=person, instance_id=instance.id)
    except Http404:
        return False
    return True


def test_each_role_reaches_the_teams_instances_it_may_use(lab):
    """Owner and admin: every instance of the team; a member: their own only; billing: none;
    another tenant: none. The gateway, the console's log-in hop and the terminal agree."""
    team, owner, admin, ana, _bo, anas, bos = lab
    payer, stranger = make_user(), make_user()
    join(team, owner, payer, role="billing")

    seen = {
        name: [(_gateway(person, i), _terminal(person, i)) for i in (anas, bos)]
        for name, person in [
            ("owner", owner),
            ("admin", admin),
            ("ana", ana),
            ("payer", payer),
            ("stranger", stranger),
        ]
    }

    assert seen == {
        "owner": [(200, True), (200, True)],
        "admin": [(200, True), (200, True)],
        "ana": [(200, True), (404, False)],
        "payer": [(404, False), (404, False)],
        "stranger": [(404, False), (404, False)],
    }


def test_a_removed_member_loses_links_keys_and_ssh_and_the_owner_is_told(
    lab, django_capture_on_commit_callbacks
):
    team, owner, _admin, ana, _bo, anas, _bos = lab
    endpoint = make_endpoint(acting(ana, team, "member"))
    ana.refresh_from_db()
    _share, url = share_create(instance=anas, port=6006, user=ana)
    _key, secret = key_create(endpoint=endpoint, name="k", user=ana)
    assert _share_status(url) == 200
    assert endpoint_check(host=endpoint_host(endpoint.id), authorization=f"Bearer {secret}")
    assert KEY_A.split()[1] in _authorized_keys(anas)
    web = console(Client(), owner, team)

    with django_capture_on_commit_callbacks(execute=True):
        answer = web.post(f"/teams/{team.pk}/act/remove/", {"user": ana.pk}, follow=True)

    assert not Membership.objects.filter(tenant=team, user=ana).exists()
    assert PortShare.objects.get().revoked_at is not None
    assert _share_status(url) == 404  # the link is dead
    assert EndpointKey.objects.get().revoked_at is not None
    refused = endpoint_check(host=endpoint_host(endpoint.id), authorization=f"Bearer {secret}")
    assert refused is not None and refused.status == 401
    assert KEY_A.split()[1] not in _authorized_keys(anas)
    assert _gateway(ana, anas) == 404 and not _terminal(ana, anas)
    event = AuditEvent.objects.get(tenant=team, action="member.removed")
    assert event.data["revoked"] == {
        "tokens": 0,
        "share_links": 1,
        "endpoint_keys": 1,
        "instances_rekeyed": 1,
    }
    assert (
        "Taken away with it: 0 API tokens of the team, 1 share links, 1 endpoint keys; 1 running "
        "instances they ordered no longer accept their SSH keys." in answer.content.decode()
    )

    # a key ana adds to her own account later reaches her own instances, not the team's
    with django_capture_on_commit_callbacks(execute=True):
        ssh_key_add(user=ana, name="desk", public_key=KEY_B)
    assert KEY_B.split()[1] not in _authorized_keys(anas)
    assert _authorized_keys(anas) == "\n"


def test_a_demotion_to_billing_takes_what_the_role_no_longer_allows(
    lab, django_capture_on_commit_callbacks
):
    team, owner, _admin, ana, _bo, anas, _bos = lab
    _share, url = share_create(instance=anas, port=6006, user=ana)

    with django_capture_on_commit_callbacks(execute=True):
        _membership, revoked = membership_role_set(
            actor=owner, team=team, user_id=ana.pk, role="billing"
        )

    assert revoked == Revoked(share_links=1, instances_rekeyed=1)
    assert _share_status(url) == 404  # the link is dead
    assert KEY_A.split()[1] not in _authorized_keys(anas)
    assert _gateway(ana, anas) == 404 and not _terminal(ana, anas)
    event = AuditEvent.objects.get(tenant=team, action="member.role_changed")
    assert event.data["revoked"]["share_links"] == 1


def test_an_admin_demoted_to_member_keeps_their_own_and_loses_the_others(lab):
    team, owner, admin, _ana, _bo, anas, _bos = lab
    own = instance_ports_set(
        instance_id=make_instance(acting(admin, team, "admin"), status="running").id, ports=[6006]
    )
    admin.refresh_from_db()
    _s1, on_anas = share_create(instance=anas, port=6006, user=admin)
    _s2, on_own = share_create(instance=own, port=6006, user=admin)

    _membership, revoked = membership_role_set(
        actor=owner, team=team, user_id=admin.pk, role="member"
    )

    assert revoked == Revoked(share_links=1)
    assert (_share_status(on_anas), _share_status(on_own)) == (404, 200)
    assert (_gateway(admin, anas), _gateway(admin, own)) == (404, 200)


def test_a_member_who_leaves_takes_nothing_of_the_others(lab):
    team, _owner, _admin, ana, bo, _anas, bos = lab
    _share, url = share_create(instance=bos, port=6006, user=bo)

    revoked = membership_remove(actor=ana, team=team, user_id=ana.pk)

    assert revoked == Revoked(instances_rekeyed=1)
    assert _share_status(url) == 200  # bo's link on bo's instance
