"""The audit log's sentences: every action code the product writes has one (read from the
sources, so a new code without its sentence fails here), they read in the reader's language
with their objects as links, and an unknown code reads as itself."""

import re
from pathlib import Path

from django.utils import translation

from billing.onboarding import team_create
from starverse.accounts.audit import audit_record
from starverse.accounts.models import AuditEvent
from teams.auditlog import SENTENCES, reading_for, sentence
from tests.factories import make_team_with_budget, make_user
from tests.product_code import product_files

# Quoted "noun.verb" strings in modules that write audit events are action codes, but for
# Stripe's event types, which the webhook handler of billing/payments.py names.
CODE = re.compile(r'"([a-z]+\.[a-z_]+)"')
STRIPE_EVENTS = {"charge.refunded", "refund.created", "refund.failed", "refund.updated"}


def _written_codes() -> set[str]:
    codes: set[str] = set()
    for path in product_files():
        text = Path(path).read_text(encoding="utf-8")
        if "audit_request" in text or "audit_record" in text:
            codes |= set(CODE.findall(text))
    return codes - STRIPE_EVENTS


def test_every_action_code_the_product_writes_has_its_sentence():
    codes = _written_codes()

    assert sorted(codes - set(SENTENCES)) == []
    # and no sentence outlives its code ("budget.set.team" is a team's own budget.set)
    assert sorted(set(SENTENCES) - codes) == ["budget.set.team"]


def _read(event: AuditEvent, reader, lang: str) -> str:
    with translation.override(lang):
        return str(sentence(event, reading_for(reader, event.tenant_id, [event])))


def test_a_budget_reads_as_a_sentence_with_the_member_linked(db):
    ana, bob, team = make_team_with_budget()
    event = AuditEvent.objects.get(tenant=team, action="budget.set")
    member = f'<a href="/teams/{team.pk}/#member-{bob.pk}">bob@example.com</a>'

    assert _read(event, ana, "en") == (
        f"ana@example.com set the monthly budget of {member} to ¥500.00."
    )
    assert _read(event, ana, "zh-hans") == f"ana@example.com 将 {member} 的月度预算设为 ¥500.00。"


def test_an_unknown_or_incomplete_event_reads_as_its_code(db):
    ana = make_user("ana@example.com")
    team = team_create(user=ana, name="Lab")
    unknown = audit_record(tenant_id=team.pk, actor=ana, action="gpu.polished")
    incomplete = audit_record(tenant_id=team.pk, actor=ana, action="disk.resized", data={})

    assert _read(unknown, ana, "en") == '<code class="mono">gpu.polished</code>'
    assert _read(incomplete, ana, "zh-hans") == '<code class="mono">disk.resized</code>'


def test_an_instance_is_a_link_only_for_a_reader_acting_for_the_team(db):
    ana = make_user("ana@example.com")
    team = team_create(user=ana, name="Lab")
    event = audit_record(
        tenant_id=team.pk,
        actor=ana,
        action="instance.stopped",
        object_type="instance",
        object_id="ins_abc",
    )

    elsewhere = _read(event, ana, "en")
    ana.act_for(team.pk, "owner")
    acting = _read(event, ana, "zh-hans")

    assert elsewhere == 'ana@example.com stopped the instance <code class="mono">ins_abc</code>.'
    assert acting == (
        'ana@example.com 停止了实例 <a href="/console/instances/ins_abc/"><code class="mono">ins_abc</code></a>。'
    )
