"""The Dask tests' cluster: two worker processes of one thread each, started and closed by
the `client` fixture once per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from distributed import Client, LocalCluster


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    client = Client(cluster)
    yield client
    client.close()
    cluster.close()
