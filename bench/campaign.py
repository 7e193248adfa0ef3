"""Campaign bench: repositories per minute for a campaign over N repositories on the GitHub
double (a real worker, the local sandbox, the `run:` change a `sed`), against the same jobs
run one by one (a worker with one thread, on a sample of the repositories),
measured in the same run and printed as a ratio.
Usage: python bench/campaign.py [--repos 200] [--baseline 20] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.store import migrate
from app.store.fleet_tables import RepoState
from tests.doubles.campaign_fleet import Fleet, Member
from tests.doubles.github.double import GitHubDouble
from tests.doubles.worker_proc import wait_until

FILE = """\
name: {name}
owner: alice
repositories: ["octo/{prefix}-*"]
change:
  run: ["sed -i 's/1.0/1.1/' version.py"]
pacing:
  max_open_prs: {max_open}
issue_repository: octo/campaigns
"""
DONE = (RepoState.PR_OPEN, RepoState.NOTHING_TO_CHANGE, RepoState.FAILED, RepoState.SKIPPED)


def run_campaign(fleet: Fleet, name: str, prefix: str, max_open: int, count: int) -> float:
    """Start the campaign and wait until every repository has its PR; repositories/minute."""
    path = fleet.root / f"{name}.yml"
    path.write_text(FILE.format(name=name, prefix=prefix, max_open=max_open))
    started = time.monotonic()
    fleet.cli("start", str(path))

    def done() -> bool:
        rows = fleet.rows(name)
        return len(rows) == count and all(r.state in DONE for r in rows.values())

    wait_until(done, 60 * count, f"campaign {name}")
    seconds = time.monotonic() - started
    failed = [r.repo for r in fleet.rows(name).values() if r.state != RepoState.PR_OPEN]
    if failed:
        raise SystemExit(f"{name}: no PR for {failed[:5]} (see {fleet.root}/worker.log)")
    return count / seconds * 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repos", type=int, default=200)
    parser.add_argument("--baseline", type=int, default=20, help="repositories run one by one")
    parser.add_argument("--concurrency", type=int, default=4, help="the worker's threads")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="onloop-campaign-", dir="/var/tmp"))
    double = GitHubDouble(root / "double")
    url = f"sqlite:///{root / 'onloop.db'}"
    migrate.upgrade(url)
    member = Member({"version.py": 'VERSION = "1.0"\n'})
    repos = {f"octo/fleet-{n:03d}": member for n in range(args.repos)}
    repos |= {f"octo/solo-{n:03d}": member for n in range(args.baseline)}
    fleet = Fleet(double, url, root, repos, concurrency=1)
    try:
        solo = run_campaign(fleet, "solo", "solo", args.baseline, args.baseline)
        fleet.restart_worker(args.concurrency)
        fanned = run_campaign(fleet, "fleet", "fleet", args.repos, args.repos)
    finally:
        fleet.close()
        double.close()
    print(
        f"campaign over {args.repos} repositories: {fanned:.1f} repositories/minute; "
        f"one by one ({args.baseline} repositories): {solo:.1f}/minute; "
        f"ratio {fanned / solo:.2f}x (worker concurrency {args.concurrency})"
    )
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
