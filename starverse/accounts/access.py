"""A person's access changed: a log-out, a new password, a deactivation, a reset second factor,
a team membership removed or demoted. Long-lived sessions that checked the person once (the
web terminal's WebSockets) are told at once, through PostgreSQL's NOTIFY on ACCESS_CHANNEL
with the person's id as payload: delivered when the transaction that made the change commits,
never for one that rolled back, to every process listening, with no broker in between. Those
sessions check again on their own at least every TERMINAL_RECHECK_S too, so a notice missed
(the listener reconnecting) is only late, never lost."""

from django.db import connection

ACCESS_CHANNEL = "starverse_access"


def access_changed(user_id: str) -> None:
    """Tell the listening sessions to check `user_id`'s access again (after commit)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [ACCESS_CHANNEL, str(user_id)])
