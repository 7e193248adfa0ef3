"""This deployment's stable id, made once and kept in the database."""

from __future__ import annotations

import secrets

import sqlalchemy.exc
from sqlalchemy import select

from app.store.db import Database
from app.store.models import Deployment


def deployment_id(db: Database) -> str:
    """The id of the deployment whose database `db` is; made on first use. Two processes
    making it at once agree: the second insert fails and both read the first."""
    with db.read() as s:
        found = s.scalar(select(Deployment.id).order_by(Deployment.created_at).limit(1))
    if found:
        return found
    try:
        with db.write_lock(), db.transaction() as s:
            if s.scalar(select(Deployment.id).limit(1)) is None:
                s.add(Deployment(id=secrets.token_hex(8)))
    except sqlalchemy.exc.IntegrityError:
        pass
    with db.read() as s:
        made = s.scalar(select(Deployment.id).order_by(Deployment.created_at).limit(1))
    assert made is not None
    return made
