"""The hand-written SQL of webhook intake (app.intake.record), statement by statement."""

from __future__ import annotations

from app.store.fastsql import Read
from app.store.models import LIVE_STATES

# Hand-written SQL for the hot path (see app.store.fastsql.Sql): `%s` a value, `%j` JSON text.
# What deciding reads, in one round trip: the repository's cached config text, and whether
# its installation is suspended or deleted (NULL for an installation onloop has no row of).
# A burst of deliveries for one repository asks it once per batch.
LOOKUP = Read(
    "SELECT (SELECT text FROM repo_configs WHERE repo = %s),"
    " (SELECT suspended FROM installations WHERE id = %s),"
    " (SELECT deleted_at FROM installations WHERE id = %s)"
)
DELIVERY = (
    "INSERT INTO deliveries (guid, event, action, installation_id, repo, sender, outcome,"
    " received_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING id"
)
JOB = (
    "INSERT INTO jobs (kind, repo, repo_id, installation_id, number, head_sha, requested_by,"
    " requested_by_id, state, live_key, params, attempts, steps, result, delivery_id,"
    " created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %j, 0, %j, %j, %s, %s)"
    " ON CONFLICT DO NOTHING RETURNING id"
)
# The same with the delivery span's W3C traceparent, while traces are on (app.core.tracing).
TRACED_JOB = JOB.replace(" created_at)", " created_at, traceparent)").replace(
    "%s, %s) ON", "%s, %s, %s) ON"
)
LIVE_JOB = "SELECT id FROM jobs WHERE live_key = %s"
TRIGGER = (
    "INSERT INTO job_triggers (trigger_key, delivery_id, created_at) VALUES (%s, %s, %s)"
    " ON CONFLICT DO NOTHING RETURNING trigger_key"
)
REPEATED = "UPDATE deliveries SET outcome = %s WHERE id = %s"
ASKED_AGAIN = "SELECT 1 FROM redelivery_requests WHERE guid = %s"
OUTBOX = "INSERT INTO outbox (job_id, created_at, publish_attempts) VALUES (%s, %s, 0)"
INSTALLATION = "SELECT repositories, suspended FROM installations WHERE id = %s"
NEW_INSTALLATION = (
    "INSERT INTO installations (account_login, account_type, repositories, suspended,"
    " deleted_at, updated_at, id) VALUES (%s, %s, %j, %s, %s, %s, %s)"
)
SET_INSTALLATION = (
    "UPDATE installations SET account_login = %s, account_type = %s, repositories = %j,"
    " suspended = %s, deleted_at = %s, updated_at = %s WHERE id = %s"
)
CANCEL_INSTALLATION = (
    "UPDATE jobs SET state = %s, live_key = NULL, finished_at = %s, result = %j"
    " WHERE installation_id = %s AND state IN (%s, %s, %s) RETURNING id"
)


def cancel_stale_sql(kinds: int, other_heads: bool) -> str:
    """Cancel a PR's live sandboxed jobs (`kinds` of them), or only those for other heads."""
    placeholders = ", ".join(["%s"] * kinds)  # only placeholders: the values are parameters
    statement = (
        "UPDATE jobs SET state = %s, live_key = NULL, finished_at = %s, result = %j"  # noqa: S608 - placeholders only
        " WHERE repo = %s AND number = %s AND state IN (%s, %s, %s)"
        f" AND kind IN ({placeholders})"
    )
    if other_heads:
        statement += " AND head_sha IS NOT NULL AND head_sha <> %s"
    return statement + " RETURNING id"


FORGET_USER = "DELETE FROM user_accounts WHERE id = %s"

assert len(LIVE_STATES) == 3, "see cancel_stale_sql"

# PostgreSQL only (SQLite has no INSERT in WITH): two writes in one round trip each. Each
# statement has its parts' parameters in their order, and answers what the parts would.
DELIVERY_AND_TRIGGER = (
    f"WITH d AS ({DELIVERY}), t AS (INSERT INTO job_triggers (trigger_key, delivery_id,"  # noqa: S608 - constants only
    " created_at) SELECT %s, id, %s FROM d ON CONFLICT DO NOTHING RETURNING trigger_key)"
    " SELECT d.id, EXISTS (SELECT 1 FROM t) FROM d"
)
JOB_AND_OUTBOX = (
    f"WITH j AS ({JOB}), o AS (INSERT INTO outbox (job_id, created_at, publish_attempts)"  # noqa: S608 - constants only
    " SELECT id, %s, 0 FROM j) SELECT id FROM j"
)
TRACED_JOB_AND_OUTBOX = JOB_AND_OUTBOX.replace(JOB, TRACED_JOB)

# PostgreSQL only: a command's delivery, its trigger, its job and the job's outbox row in
# one statement. The job is made only when the trigger is this delivery's (the first of the
# person's act) and no live job has its key; the answer is (delivery id, whether the trigger
# is this delivery's, the job's id or NULL). The job's values are cast: in INSERT … SELECT
# nothing gives them the columns' types.
_JOB_SELECT = (
    "INSERT INTO jobs (kind, repo, repo_id, installation_id, number, head_sha, requested_by,"
    " requested_by_id, state, live_key, params, attempts, steps, result, created_at,"
    " delivery_id) SELECT %s::text, %s::text, %s::bigint, %s::bigint, %s::integer,"
    " %s::text, %s::text, %s::bigint, %s::text, %s::text, %j, 0, %j, %j, %s, d.id"
    " FROM d WHERE EXISTS (SELECT 1 FROM t) ON CONFLICT DO NOTHING RETURNING id"
)
_TRACED_JOB_SELECT = _JOB_SELECT.replace(" delivery_id)", " delivery_id, traceparent)").replace(
    "%s, d.id", "%s, d.id, %s::text"
)


def _delivery_to_job(job: str) -> str:
    return (
        f"WITH d AS ({DELIVERY}), t AS (INSERT INTO job_triggers (trigger_key, delivery_id,"  # noqa: S608 - constants only
        f" created_at) SELECT %s, id, %s FROM d ON CONFLICT DO NOTHING RETURNING trigger_key),"
        f" j AS ({job}), o AS (INSERT INTO outbox (job_id, created_at, publish_attempts)"
        " SELECT id, %s, 0 FROM j) SELECT d.id, EXISTS (SELECT 1 FROM t), (SELECT id FROM j)"
        " FROM d"
    )


DELIVERY_TO_JOB = _delivery_to_job(_JOB_SELECT)
TRACED_DELIVERY_TO_JOB = _delivery_to_job(_TRACED_JOB_SELECT)
