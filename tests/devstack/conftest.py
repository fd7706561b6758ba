from collections.abc import Iterator

import pytest
from kubernetes import client, config

from devstack.kube import KubeEmulator


@pytest.fixture
def api(emu: KubeEmulator, kubeconfig: str) -> Iterator[client.CoreV1Api]:
    """The official client on the reset session emulator (`emu`), configured from the
    kubeconfig the emulator wrote."""
    api_client = config.new_client_from_config(config_file=kubeconfig)
    yield client.CoreV1Api(api_client)
    api_client.close()
