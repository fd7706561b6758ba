import pytest

from tests.factories import fund, make_user


@pytest.fixture
def renter(catalog, client_for, settings):
    """A funded account and its API client, allowed enough GPUs for the emulated fleet."""
    settings.MAX_RUNNING_GPUS = 32
    user = make_user()
    fund(user, 100_000)
    return user, client_for(user)
