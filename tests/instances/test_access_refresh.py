"""SSH keys follow the console: adding or deleting one renders the access Secret of every
running instance again, so a deleted key stops opening them without a restart."""

import base64

from instances.models import Instance
from starverse.accounts.models import User
from starverse.accounts.services import ssh_key_add, ssh_key_delete
from starverse.core import kube
from tests.factories import SSH_KEYS, make_instance, make_user


def _authorized_keys(instance: Instance) -> str:
    secret = kube.read("Secret", instance.k8s_namespace, f"{instance.k8s_name}-access")
    assert secret is not None
    if "stringData" in secret:
        return str(secret["stringData"]["authorized_keys"])
    return base64.b64decode(secret["data"]["authorized_keys"]).decode()


def test_a_deleted_key_leaves_the_running_instances_secret(
    cluster, catalog, django_capture_on_commit_callbacks
):
    user = make_user()
    kept, dropped = list(SSH_KEYS.values())[:2]
    with django_capture_on_commit_callbacks(execute=True):
        ssh_key_add(user=user, name="kept", public_key=kept["public_key"])
    instance = make_instance(user, status="running")
    instance.refresh_from_db()
    assert kept["public_key"].split()[1] in _authorized_keys(instance)

    with django_capture_on_commit_callbacks(execute=True):
        key = ssh_key_add(user=user, name="laptop", public_key=dropped["public_key"])
    assert dropped["public_key"].split()[1] in _authorized_keys(instance)

    with django_capture_on_commit_callbacks(execute=True):
        ssh_key_delete(key=key)
    keys = _authorized_keys(instance)
    assert dropped["public_key"].split()[1] not in keys
    assert kept["public_key"].split()[1] in keys


def test_another_tenants_instances_are_not_touched(
    cluster, catalog, django_capture_on_commit_callbacks
):
    owner, other = make_user(), make_user()
    instance = make_instance(owner, status="running")
    instance.refresh_from_db()
    before = _authorized_keys(instance)
    with django_capture_on_commit_callbacks(execute=True):
        ssh_key_add(user=other, name="x", public_key=SSH_KEYS["k_ed"]["public_key"])
    assert _authorized_keys(instance) == before


def test_a_team_instance_takes_its_orderers_keys(
    cluster, catalog, django_capture_on_commit_callbacks
):
    """Keys belong to people: an instance ordered for a team opens with the orderer's keys
    (named or all of them), not the team's other members', and a key the orderer adds later
    reaches it."""
    from billing.onboarding import team_create
    from starverse.accounts.teams import invitation_accept, invitation_create, invitation_token

    owner, member = make_user(), make_user()
    team = team_create(user=owner, name="lab")
    invitation = invitation_create(actor=owner, team=team, email=member.email, role="member")
    invitation_accept(user=member, token=invitation_token(invitation))
    mine, theirs, later = (SSH_KEYS[name]["public_key"] for name in list(SSH_KEYS)[:3])
    ssh_key_add(user=member, name="mine", public_key=mine)
    ssh_key_add(user=owner, name="theirs", public_key=theirs)
    member.act_for(team.pk, "member")
    instance = make_instance(member, status="running")
    instance.refresh_from_db()
    assert instance.tenant_id == team.pk
    keys = _authorized_keys(instance)
    assert mine.split()[1] in keys and theirs.split()[1] not in keys

    with django_capture_on_commit_callbacks(execute=True):
        ssh_key_add(user=User.objects.get(pk=member.pk), name="later", public_key=later)
    assert later.split()[1] in _authorized_keys(instance)
