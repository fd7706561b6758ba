"""An invitation's e-mail is written in both languages (the invitee's is not known), the
inviter's first."""

from django.core import mail

from billing.onboarding import team_create
from starverse.accounts.teams import invitation_create, invitation_for_token, invitation_link
from tests.factories import make_user

EN = (
    "Hello,\n\n"
    "ana@example.com invites you to the team Lab on Starverse, as Member. Sign in (or sign up) "
    "with this address, then open this link to join:\n\n"
    "{link}\n\n"
    "The link works once and for 7 days. If you do not expect this, ignore this e-mail.\n\n"
    "— The Starverse team"
)
ZH = (
    "您好：\n\n"
    "ana@example.com 邀请你以成员身份加入 Starverse 上的团队 Lab。请用此邮箱登录（或注册），"
    "然后打开此链接加入：\n\n"
    "{link}\n\n"
    "此链接只能使用一次，7 天内有效。如果你没有预期收到此邮件，请忽略。\n\n"
    "—— Starverse 团队"
)
SUBJECTS = {
    "en": "You are invited to the team Lab on Starverse",
    "zh": "你被邀请加入 Starverse 上的团队 Lab",
}


def _invite(language: str, on_commit):
    ana = make_user("ana@example.com")
    team = team_create(user=ana, name="Lab")
    mail.outbox.clear()
    with on_commit(execute=True):  # the mail task is enqueued after commit
        invitation = invitation_create(
            actor=ana, team=team, email="wang@lab.edu.cn", role="member", language=language
        )
    (sent,) = mail.outbox
    # the link the mail carries: its token is signed at the second it was sent, which the
    # test's own link of the next second would not match
    prefix = invitation_link(invitation).rsplit("/", 2)[0] + "/"
    link = next(word for word in sent.body.split() if word.startswith(prefix))
    assert invitation_for_token(link[len(prefix) :].rstrip("/")).pk == invitation.pk
    return sent, link


def test_an_invitation_from_an_english_reader_reads_in_english_then_chinese(
    db, django_capture_on_commit_callbacks
):
    sent, link = _invite("en", django_capture_on_commit_callbacks)

    assert sent.to == ["wang@lab.edu.cn"]
    assert sent.subject == f"{SUBJECTS['en']} / {SUBJECTS['zh']}"
    assert sent.body == f"{EN.format(link=link)}\n\n— — —\n\n{ZH.format(link=link)}\n"


def test_an_invitation_from_a_chinese_reader_reads_in_chinese_then_english(
    db, django_capture_on_commit_callbacks
):
    sent, link = _invite("zh-hans", django_capture_on_commit_callbacks)

    assert sent.subject == f"{SUBJECTS['zh']} / {SUBJECTS['en']}"
    assert sent.body == f"{ZH.format(link=link)}\n\n— — —\n\n{EN.format(link=link)}\n"
