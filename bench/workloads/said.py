"""What the users of the workloads say, and what only tools report: the checked statements."""

from __future__ import annotations

from typing import Final

from bench.workloads.model import Statement

# The facts of the tool-heavy agent and the chatty assistant: the kinds of things users say
# early and expect to be remembered (a region, a ticket, a port rule, a version, a path, ...).
FACTS: Final = (
    Statement("fact", "Deploy everything to the eu-west-3 region.", "eu-west-3"),
    Statement("fact", "Track this work under ticket PAY-7731.", "PAY-7731"),
    Statement("rule", "Never open port 8443 on any host.", "Never open port 8443"),
    Statement("fact", "We pin payments-sdk at version 3.14.2.", "3.14.2"),
    Statement("fact", "The service lives in /opt/payments/ledger-svc.", "/opt/payments/ledger-svc"),
    Statement("constraint", "The cloud budget for this month is $4,200.", "$4,200"),
    Statement("rule", "Always ask @mkovacs to review before merging.", "@mkovacs"),
    Statement("fact", "Page the #pay-oncall channel when something breaks.", "#pay-oncall"),
    Statement("constraint", "Keep the p95 latency under 180 ms.", "180 ms"),
    Statement("preference", "Write the release notes in British English.", "British English"),
)

_RULES: Final = (
    "Never delete the production database snapshots",
    "Never run terraform apply without a reviewed plan",
    "Never print secrets or API keys in the logs",
)

# The typed statements, as first made; `UPDATES` later give four of them a new value.
TYPED: Final = (
    *(Statement("rule", f"{rule}.", rule) for rule in _RULES),
    Statement("constraint", "The budget is $500.", "$500", "budget"),
    Statement("constraint", "Every reply must stay under 300 words.", "300 words"),
    Statement("constraint", "Scripts must run on Python 3.11.", "Python 3.11", "python"),
    Statement("fact", "The staging cluster is k8s-stg-euw1.", "k8s-stg-euw1"),
    Statement("fact", "Our release branch is release/2024.06.", "release/2024.06"),
    Statement("fact", "The commit that broke the build is 9f3c2e1b.", "9f3c2e1b"),
    Statement("fact", "The team lead is Priya Raman.", "Priya Raman"),
    Statement(
        "goal",
        "Goal: migrate the billing service to the new queue.",
        "migrate the billing service to the new queue",
    ),
    Statement(
        "goal",
        "Status: the schema migration is done and the backfill is next.",
        "the backfill is next",
        "status",
    ),
    Statement("preference", "No em-dashes in anything you write.", "No em-dashes"),
    Statement("preference", "My timezone is America/Los_Angeles.", "America/Los_Angeles", "tz"),
    Statement("preference", "Use metric units.", "metric units"),
    Statement("preference", "Keep commit subjects under 72 characters.", "72 characters"),
)
UPDATES: Final = (
    Statement("constraint", "The budget is now $700.", "$700", "budget"),
    Statement(
        "goal",
        "Status: the backfill is done and the cutover is next.",
        "the cutover is next",
        "status",
    ),
    Statement("preference", "My timezone is now Europe/Berlin.", "Europe/Berlin", "tz"),
    Statement("constraint", "Scripts must now run on Python 3.12.", "Python 3.12", "python"),
)

# The labelled statements: shared category labels, as users and agent frameworks write them.
# Under one label, a statement about another subject is a new statement (four FACT: lines are
# four facts); near-duplicates about different things (the staging and the production
# database, two TODOs, two restart rules) must not merge. Rules never replace each other.
LABELLED: Final = (
    Statement(
        "fact",
        "FACT: The project codename is LANTERN and the launch deadline is 2026-11-15.",
        "LANTERN and the launch deadline is 2026-11-15",
    ),
    Statement(
        "fact",
        "FACT: The production database is Postgres 15 in us-west-2.",
        "Postgres 15 in us-west-2",
        "production database",
    ),
    Statement(
        "fact", "FACT: The staging database is Postgres 14.", "staging database is Postgres 14"
    ),
    Statement("fact", "FACT: The on-call engineer this week is Dana Okafor.", "Dana Okafor"),
    Statement("goal", "GOAL STATE: Steps 1-2 of 5 are done.", "Steps 1-2 of 5", "steps"),
    Statement(
        "goal",
        "GOAL STATE: The payments API is migrated to the v2 endpoints.",
        "migrated to the v2 endpoints",
    ),
    Statement(
        "goal", "GOAL STATE: The invoice exporter is blocked on ticket OPS-4471.", "OPS-4471"
    ),
    Statement(
        "goal",
        "GOAL STATE: Load tests for the checkout flow are scheduled for Thursday.",
        "scheduled for Thursday",
    ),
    Statement(
        "preference", "USER PREFERENCE: Answer in at most 5 bullet points.", "at most 5 bullet"
    ),
    Statement(
        "preference",
        "USER PREFERENCE: Give times in UTC and dates as YYYY-MM-DD.",
        "times in UTC and dates as YYYY-MM-DD",
    ),
    Statement("preference", "USER PREFERENCE: Call me Sam.", "Call me Sam"),
    Statement(
        "preference",
        "USER PREFERENCE: Show shell commands in fenced code blocks.",
        "fenced code blocks",
    ),
    Statement(
        "rule",
        "RULE: Never restart the primary database during business hours.",
        "Never restart the primary database during business hours",
    ),
    Statement(
        "rule",
        "RULE: Never restart the replica database without a fresh snapshot.",
        "Never restart the replica database without a fresh snapshot",
    ),
    Statement("constraint", "Budget: $500", "$500", "budget"),
    Statement(
        "constraint",
        "HARD CONSTRAINT: Every migration must finish within a 30-minute window.",
        "30-minute window",
    ),
    Statement(
        "note",
        "Note: the vendor API rate limit resets at midnight UTC.",
        "rate limit resets at midnight UTC",
    ),
    Statement("note", "TODO: Email Alice about the invoice exporter.", "Email Alice"),
    Statement("note", "TODO: Email Bob about the load tests.", "Email Bob"),
)
# The same subjects with new values: the earlier values are stale.
LABELLED_UPDATES: Final = (
    Statement("constraint", "Budget: $700", "$700", "budget"),
    Statement("goal", "GOAL STATE: Steps 1-3 of 5 are done.", "Steps 1-3 of 5", "steps"),
    Statement(
        "fact",
        "FACT: The production database is now MySQL 8 in us-east-1.",
        "MySQL 8 in us-east-1",
        "production database",
    ),
)

# The identifiers only tool results carry, each in the first line of one early result; the
# user and the model never repeat them.
_SHA256: Final = "4e1b9f0c7a3d2e8b6f5a1c9d0e7b3a2f8c6d4e1f0a9b8c7d6e5f4a3b2c1d0e9f"
ARTIFACTS: Final = (
    Statement(
        "artifact", "Build finished: build-7f3a9c21 (3 artifacts uploaded).", "build-7f3a9c21"
    ),
    Statement("artifact", f"sha256 of dist/app-bundle.tar.gz: {_SHA256}", _SHA256),
    Statement("artifact", "Packaged version: v4.19.2", "v4.19.2"),
    Statement(
        "artifact",
        "Release directory: /var/lib/app/releases/2026-11-03",
        "/var/lib/app/releases/2026-11-03",
    ),
)
ARTIFACTS_QUESTION: Final = (
    "Before we ship: which build id, sha256 checksum, version and release directory did the "
    "tools report at the start of this session? I need them for the release notes."
)
