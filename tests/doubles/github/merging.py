"""A person merging a pull request on the double, and the log of pulls opened and closed."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from tests.doubles.github import gitrepo
from tests.doubles.github.model import Issue, Repo


@dataclass(frozen=True)
class PullEvent:
    """A pull request opened, closed or merged, in the order the double saw it."""

    at: float
    action: Literal["opened", "closed", "merged"]
    repo: str
    number: int


class Merging:
    """Mixed into State: `merge_pull` as a maintainer clicking Merge, and `pull_log`."""

    if TYPE_CHECKING:
        lock: threading.RLock

        def repo(self, full_name: str) -> Repo: ...
        def issue(self, repo: str, number: int) -> Issue: ...

    pull_log: list[PullEvent]

    def log_pull(self, action: Literal["opened", "closed", "merged"], repo: str, n: int) -> None:
        self.pull_log.append(PullEvent(time.time(), action, repo, n))

    def merge_pull(self, repo: str, number: int) -> str:
        """Merge the pull request's head into its base (a merge commit), as a person does
        on GitHub; the merge commit's sha."""
        with self.lock:
            r, issue = self.repo(repo), self.issue(repo, number)
            p = issue.pull
            assert p is not None and issue.state == "open"
            base = gitrepo.rev(r.git_dir, f"refs/heads/{p.base_ref}")
            head = gitrepo.rev(r.git_dir, f"refs/heads/{p.head_ref}")
            assert base is not None and head is not None
            tree = gitrepo.git(r.git_dir, "merge-tree", "--write-tree", base, head).split()[0]
            message = f"Merge pull request #{number}"
            sha = gitrepo.git(
                r.git_dir, "commit-tree", tree, "-p", base, "-p", head, "-m", message
            ).strip()
            gitrepo.git(r.git_dir, "update-ref", f"refs/heads/{p.base_ref}", sha, base)
            p.merged, p.head_sha, p.base_sha = True, head, sha
            issue.state, issue.closed_at = "closed", time.time()
            self.log_pull("merged", r.full_name, number)
            return sha

    def most_open_pulls(self) -> int:
        """The most pull requests open at once over the double's life, from its log."""
        open_now: set[tuple[str, int]] = set()
        most = 0
        for event in self.pull_log:
            if event.action == "opened":
                open_now.add((event.repo, event.number))
            else:
                open_now.discard((event.repo, event.number))
            most = max(most, len(open_now))
        return most
