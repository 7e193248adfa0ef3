"""The route tables: REST (paths below /api/v3) and web pages on the host (OAuth goes here)."""

from __future__ import annotations

from tests.doubles.github.api import Route
from tests.doubles.github.handlers import (
    actions,
    apps,
    branches,
    checks,
    graphql,
    issues,
    manifests,
    matching_refs,
    oauth,
    pulls,
    refs,
    repos,
    review_comments,
    review_threads,
)

R = "/repos/{owner}/{repo}"

ROUTES: list[Route] = [
    # the app (app JWT) and its installations
    Route("GET", "/app", apps.get_app),
    Route("GET", "/app/installations", apps.list_installations),
    Route("GET", "/app/installations/{id:int}", apps.get_installation),
    Route("POST", "/app/installations/{id:int}/access_tokens", apps.create_access_token),
    Route("GET", "/installation/repositories", apps.installation_repositories),
    Route("GET", "/app/hook/deliveries", apps.list_deliveries),
    Route("GET", "/app/hook/deliveries/{id:int}", apps.get_delivery),
    Route("POST", "/app/hook/deliveries/{id:int}/attempts", apps.redeliver),
    Route("POST", "/app-manifests/{code}/conversions", manifests.convert),
    # users
    Route("GET", "/user", repos.get_authenticated_user),
    Route("GET", "/users/{user}", repos.get_user),
    # repositories and their contents
    Route("GET", R, repos.get_repo),
    Route("GET", R + "/contents", repos.get_contents),
    Route("GET", R + "/contents/{path:path}", repos.get_contents),
    Route(
        "GET",
        R + "/branches/{branch:path}/protection/required_signatures",
        branches.required_signatures,
    ),
    Route("GET", R + "/branches/{branch:path}", repos.get_branch),
    Route("GET", R + "/rules/branches/{branch:path}", branches.branch_rules),
    Route("POST", R + "/git/refs", refs.create_ref),
    Route("POST", R + "/merges", refs.merge),
    Route("GET", R + "/commits/{sha}/pulls", pulls.commit_pulls),
    Route("GET", R + "/commits/{ref}/check-runs", checks.list_for_ref),
    Route("GET", R + "/commits/{ref:path}", repos.get_commit),
    Route("GET", R + "/collaborators/{user}/permission", repos.collaborator_permission),
    Route("GET", R + "/git/matching-refs/{ref:path}", matching_refs.matching_refs),
    Route("DELETE", R + "/git/refs/{ref:path}", matching_refs.delete_ref),
    # issues, comments, reactions, labels
    Route("GET", R + "/issues", issues.list_issues),
    Route("POST", R + "/issues", issues.create_issue),
    Route("GET", R + "/issues/comments/{id:int}", issues.get_comment),
    Route("PATCH", R + "/issues/comments/{id:int}", issues.update_comment),
    Route("DELETE", R + "/issues/comments/{id:int}", issues.delete_comment),
    Route("GET", R + "/issues/comments/{id:int}/reactions", issues.list_reactions),
    Route("POST", R + "/issues/comments/{id:int}/reactions", issues.create_reaction),
    Route("GET", R + "/issues/{number:int}", issues.get_issue),
    Route("PATCH", R + "/issues/{number:int}", issues.update_issue),
    Route("GET", R + "/issues/{number:int}/comments", issues.list_comments),
    Route("POST", R + "/issues/{number:int}/comments", issues.create_comment),
    Route("POST", R + "/issues/{number:int}/labels", issues.add_labels),
    Route("DELETE", R + "/issues/{number:int}/labels/{name}", issues.remove_label),
    # GitHub Actions: runs, jobs, logs; the check runs of their suites
    Route("GET", R + "/actions/runs", actions.list_runs),
    Route("GET", R + "/actions/runs/{id:int}", actions.get_run),
    Route("GET", R + "/actions/runs/{id:int}/jobs", actions.list_run_jobs),
    Route("GET", R + "/actions/jobs/{id:int}/logs", actions.job_logs),
    Route("GET", R + "/check-suites/{id:int}/check-runs", actions.suite_check_runs),
    # pull requests and reviews (merging and approving are refused)
    Route("GET", R + "/pulls", pulls.list_pulls),
    Route("POST", R + "/pulls", pulls.create_pull),
    Route("GET", R + "/pulls/{number:int}", pulls.get_pull),
    Route("PATCH", R + "/pulls/{number:int}", pulls.update_pull),
    Route("PUT", R + "/pulls/{number:int}/merge", pulls.merge_pull),
    Route("GET", R + "/pulls/{number:int}/reviews", pulls.list_reviews),
    Route("POST", R + "/pulls/{number:int}/reviews", pulls.create_review),
    Route("GET", R + "/pulls/{number:int}/reviews/{id:int}", pulls.get_review),
    Route("GET", R + "/pulls/{number:int}/commits", pulls.list_commits),
    Route("POST", R + "/pulls/{number:int}/reviews/{id:int}/events", pulls.submit_review),
    Route(
        "GET",
        R + "/pulls/{number:int}/reviews/{id:int}/comments",
        review_comments.list_review_comments,
    ),
    Route("GET", R + "/pulls/{number:int}/comments", review_comments.list_comments),
    Route("GET", R + "/pulls/comments/{id:int}", review_comments.get_comment),
    Route(
        "POST",
        R + "/pulls/{number:int}/comments/{comment_id:int}/replies",
        review_comments.create_reply,
    ),
    Route("GET", R + "/pulls/{number:int}/files", review_threads.list_files),
    # check runs (only installations may write them)
    Route("POST", R + "/check-runs", checks.create),
    Route("GET", R + "/check-runs/{id:int}", checks.get),
    Route("PATCH", R + "/check-runs/{id:int}", checks.update),
]

# Web pages at the double's root (settings.github_url), e.g. /login/oauth/authorize and
# /login/oauth/access_token; handlers may answer bytes (HTML, form-encoded) with a Content-Type.
WEB_ROUTES: list[Route] = [
    Route("POST", "/settings/apps/new", manifests.new_app),
    Route("POST", "/organizations/{org}/settings/apps/new", manifests.new_app),
    Route("GET", "/login/oauth/authorize", oauth.authorize),
    Route("POST", "/login/oauth/access_token", oauth.access_token),
    Route("GET", "/_actions/logs/{key}", actions.download_log),
    Route("POST", "/api/graphql", graphql.graphql),
]
