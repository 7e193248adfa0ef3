"""A sandbox image not built by `onloop sandbox build-image`: the built one without /opt/tools."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def plain_image(client: Any, built: str) -> Iterator[str]:
    """A tag of `built` with /opt/tools removed (no tools Python, no proxy.py), as a plain
    Debian or Python image would be; removed afterwards."""
    tag = f"onloop-test-plain:{uuid.uuid4().hex[:12]}"
    container = client.containers.run(
        built, ["rm", "-rf", "/opt/tools"], user="0:0", detach=True, network_disabled=True
    )
    try:
        assert container.wait(timeout=60)["StatusCode"] == 0
        repository, version = tag.split(":")
        container.commit(repository, version, changes=['CMD ["sleep", "infinity"]'])
    finally:
        container.remove(force=True)
    try:
        yield tag
    finally:
        client.images.remove(tag, force=True)
