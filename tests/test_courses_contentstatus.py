"""What staff read about each student's content pull (engine-free): the status file a course
server writes is parsed field by field (the student can write anything into it), reasons are
one line, short and without credentials, and the line per student says the worst that happened.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from jupyterhub_gpulab.courses.contentstatus import (
    MAX_REASON,
    MAX_STATUS_BYTES,
    describe,
    one_line,
    parse_status,
)

AT = "2026-12-02T16:40:00Z"
WHEN = datetime(2026, 12, 2, 16, 40, tzinfo=timezone.utc)


def line(*fields: str) -> str:
    return "\t".join(fields) + "\n"


def now(t: datetime) -> str:
    return t.strftime("%H:%M")


def test_each_written_state_is_read_back():
    text = (
        line("pulled", "ml101", AT, "", "")
        + line("kept", "extra", AT, "extra_backup_20261202164000", "history rewritten")
        + line("failed", "data", AT, "", "cannot read the repository: fatal: x")
    )
    pulled, kept, failed = parse_status(text)
    assert (pulled.state, pulled.dir, pulled.at) == ("pulled", "ml101", WHEN)
    assert (kept.backup, kept.reason) == ("extra_backup_20261202164000", "history rewritten")
    assert failed.reason == "cannot read the repository: fatal: x"


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(line("owned", "ml101", AT, "", ""), id="unknown-state"),
        pytest.param(line("pulled", "../etc", AT, "", ""), id="folder-outside-home"),
        pytest.param(line("pulled", "ml101", "yesterday", "", ""), id="bad-time"),
        pytest.param(line("kept", "ml101", AT, "/etc/ssl", "x"), id="backup-not-a-backup-name"),
        pytest.param("pulled\tml101\n", id="too-few-fields"),
        pytest.param(line("pulled", "ml101", AT, "", "", "extra"), id="too-many-fields"),
    ],
)
def test_a_line_not_in_the_written_form_is_dropped(bad):
    assert parse_status(bad + line("pulled", "ok", AT, "", "")) == parse_status(
        line("pulled", "ok", AT, "", "")
    )


def test_only_the_first_bytes_of_a_huge_file_are_read():
    text = line("pulled", "ml101", AT, "", "") * (MAX_STATUS_BYTES // 10)
    assert len(parse_status(text)) <= MAX_STATUS_BYTES // len(line("pulled", "ml101", AT, "", ""))


def test_a_reason_is_one_short_line_without_credentials():
    raw = "fatal: could not read https://ann:s3cret@git.example.edu/x.git\x1b[31m" + "y" * 500
    (s,) = parse_status(line("failed", "ml101", AT, "", raw))
    assert "s3cret" not in s.reason and "ann" not in s.reason
    assert "https://git.example.edu/x.git" in s.reason
    assert len(s.reason) <= MAX_REASON and "\x1b" not in s.reason
    assert one_line("a\nb\r\nc") == "a b c"


def test_the_line_per_student_says_the_worst_that_happened():
    assert describe((), now) is None
    pulled = parse_status(line("pulled", "ml101", AT, "", ""))
    assert describe(pulled, now)["message"] == "pulled at 16:40"
    assert describe(pulled, now)["state"] == "pulled"
    kept = parse_status(
        line("kept", "ml101", AT, "ml101_backup_20261202164000", "history rewritten")
    )
    view = describe(kept, now)
    assert view["state"] == "kept"
    assert view["message"] == (
        "history rewritten: your copy kept in ~/ml101_backup_20261202164000; pulled at 16:40"
    )
    both = parse_status(
        line("failed", "data", AT, "", "the repository has no branch week9")
        + line("pulled", "ml101", AT, "", "")
    )
    view = describe(both, now)
    assert view["state"] == "failed"
    assert view["message"] == "failed: ~/data: the repository has no branch week9"
    assert [s["dir"] for s in view["sources"]] == ["data", "ml101"]
    # a failure after the copy was moved aside still says where the copy is
    moved = parse_status(line("failed", "ml101", AT, "ml101_backup_20261202164000", "fatal: x"))
    assert describe(moved, now)["message"] == (
        "failed: ~/ml101: fatal: x; your copy of ~/ml101 kept in ~/ml101_backup_20261202164000"
    )


@pytest.mark.parametrize(
    "config, network",
    [
        pytest.param({}, "bridge", id="docker-default"),
        pytest.param({"DockerSpawner": {"network_name": "labnet"}}, "labnet", id="dockerspawner"),
        pytest.param(
            {"DockerSpawner": {"network_name": "a"}, "GPUDockerSpawner": {"network_name": "b"}},
            "b",
            id="ours-wins",
        ),
    ],
)
def test_the_repository_is_asked_from_the_network_the_servers_join(config, network):
    from traitlets.config import Config

    from jupyterhub_gpulab.courses.config import GPULabCourses
    from jupyterhub_gpulab.courses.manager import CourseManager

    settings = GPULabCourses(config=Config(config))
    assert CourseManager(None, settings, None, tz=timezone.utc, secret=None).network() == network
