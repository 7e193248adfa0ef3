"""How far a job trusts the code at the head it runs: network, credentials, caches, snapshots."""

from __future__ import annotations

from enum import StrEnum


class HeadTrust(StrEnum):
    """Decided once per job by its blueprint (tasks/blueprints/heads.py).

    An untrusted head's setup gets no operator credentials, no private index and no shared
    download cache, writes no dependency snapshot, and its output stays off public comments.
    """

    TRUSTED = "trusted"  # the default branch, or a head a permitted person wrote here
    UNTRUSTED = "untrusted"  # a fork's head, or one whose author lacks the trigger permission
