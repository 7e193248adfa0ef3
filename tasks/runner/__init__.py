"""Running one job: claim and lease, caps, the job context, people and notices."""
