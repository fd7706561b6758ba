"""One notice path: every account starts with one e-mail channel (its person's address, the
language they signed up in, the defaults), and a notice reaches a person once, through it, in
their language, with a link; the products mail no notices of their own."""

from django.core import mail
from django.utils import translation

from billing.choices import TransactionKind
from billing.models import Wallet
from billing.notices import runway_notices_check
from billing.onboarding import team_create
from billing.services import ledger_post
from events.choices import EMAIL_DEFAULTS, EventType
from events.emit import emit
from events.models import NotificationChannel
from teams.services import membership_remove
from tests.factories import make_user
from tests.teams.test_teams import join


def _low_balance(user):
    """¥50 left at ¥60 an hour: below an hour of runway."""
    wallet = Wallet.objects.get(tenant=user.tenant)
    ledger_post(
        wallet_id=wallet.id,
        key="topup:a",
        kind=TransactionKind.TOPUP,
        amount_fen=5_000,
        description="t",
    )
    return {user.tenant_id: 6_000}


def test_a_new_account_starts_with_an_e_mail_channel_in_its_language(db):
    with translation.override("zh-hans"):
        person = make_user(verified=False)
    with translation.override("en"):
        other = make_user(verified=False)

    channel = NotificationChannel.objects.get(tenant_id=person.tenant_id)
    assert (channel.kind, channel.target, channel.language, channel.events, channel.enabled) == (
        "email",
        person.email,
        "zh-hans",
        list(EMAIL_DEFAULTS),
        True,
    )
    assert NotificationChannel.objects.get(tenant_id=other.tenant_id).language == "en"


def test_a_new_teams_notices_reach_its_owners_and_admins_of_the_day(
    db, django_capture_on_commit_callbacks
):
    owner = make_user()
    team = team_create(user=owner, name="Vision lab")
    admin, member = make_user(), make_user()
    join(team, owner, admin, role="admin")
    join(team, owner, member, role="member")

    channel = NotificationChannel.objects.get(tenant_id=team.pk)
    assert (channel.kind, channel.target, channel.created_by_id) == ("email", "", owner.pk)
    with django_capture_on_commit_callbacks(execute=True):
        emit(team.pk, EventType.JOB_FAILED, {"id": "job_x", "name": "sft", "url": "/c/"})

    [sent] = mail.outbox
    assert sorted(sent.to) == sorted([owner.email, admin.email])


def test_a_teams_notice_about_what_a_member_ordered_reaches_that_member_while_one(
    db, django_capture_on_commit_callbacks
):
    owner = make_user()
    team = team_create(user=owner, name="Speech lab")
    member, other = make_user(), make_user()
    join(team, owner, member, role="member")
    join(team, owner, other, role="member")
    about = {"id": "inst_x", "name": "a100", "url": "/c/", "ordered_by": member.pk}

    with django_capture_on_commit_callbacks(execute=True):
        emit(team.pk, EventType.INSTANCE_IDLE_WARNING, about)
    [sent] = mail.outbox
    assert sorted(sent.to) == sorted([owner.email, member.email])  # not the other member

    membership_remove(actor=owner, team=team, user_id=member.pk)
    mail.outbox.clear()
    with django_capture_on_commit_callbacks(execute=True):
        emit(team.pk, EventType.INSTANCE_IDLE_WARNING, about)
    [sent] = mail.outbox
    assert sent.to == [owner.email]  # a removed member hears nothing more of the team


def test_a_low_balance_is_one_mail_in_chinese_for_a_chinese_reader(
    db, django_capture_on_commit_callbacks, settings
):
    settings.PUBLIC_BASE_URL = "https://console.example.cn"
    with translation.override("zh-hans"):
        person = make_user(verified=False)
    spend = _low_balance(person)

    with django_capture_on_commit_callbacks(execute=True):
        assert runway_notices_check(spend) == 1

    [sent] = mail.outbox
    assert sent.to == [person.email]
    text = "余额不足：还剩 ¥50.00，按当前花费约可用 50 分钟。请充值以免实例停止。"
    assert (sent.subject, sent.body) == (text, f"{text}\nhttps://console.example.cn/billing/")


def test_a_channel_switched_off_means_no_mail(db, django_capture_on_commit_callbacks):
    person = make_user(verified=False)
    NotificationChannel.objects.filter(tenant_id=person.tenant_id).update(enabled=False)
    spend = _low_balance(person)

    with django_capture_on_commit_callbacks(execute=True):
        assert runway_notices_check(spend) == 1

    assert mail.outbox == []
