"""Signals the apps above accounts listen to. Sent inside the transaction that made the
change; receivers start their work with enqueue_on_commit, so a rolled-back change starts
nothing."""

from django.dispatch import Signal

# kwargs: tenant_id (the person's own account). Their SSH keys changed: the access Secrets of
# the instances they ordered, for themselves or for a team, are rendered again (instances).
ssh_keys_changed = Signal()
