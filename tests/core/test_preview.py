"""Schedule preview: next fire times in the job's zone and UTC, DST changes flagged."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nexopoll.core.preview import preview
from nexopoll.core.schedule import AtSchedule, CronSchedule, EverySchedule


def test_spring_forward_gap_is_flagged_with_the_jump_time():
    times = preview(
        CronSchedule("0 30 2 * * *", "Europe/Paris"),
        after=datetime(2027, 3, 26, tzinfo=UTC),
        offset=timedelta(0),
        count=4,
    )
    assert [t.local.strftime("%m-%d %H:%M") for t in times] == [
        "03-26 02:30",
        "03-27 02:30",
        "03-28 03:00",
        "03-29 02:30",
    ]
    assert times[2].note == "02:30 does not exist on 2027-03-28 in Europe/Paris: fires at 03:00"
    assert times[2].at == datetime(2027, 3, 28, 1, 0, tzinfo=UTC)
    assert [t.note for t in times if t is not times[2]] == ["", "", ""]


def test_fall_back_repeat_fires_once_and_is_flagged():
    times = preview(
        CronSchedule("0 30 2 * * *", "Europe/Paris"),
        after=datetime(2026, 10, 24, 12, tzinfo=UTC),
        offset=timedelta(0),
        count=2,
    )
    assert times[0].at == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)  # the first 02:30 (CEST)
    assert "happens twice on 2026-10-25 in Europe/Paris" in times[0].note
    assert times[1].at == datetime(2026, 10, 26, 1, 30, tzinfo=UTC) and times[1].note == ""


def test_times_include_the_stagger_and_every_schedules_are_utc():
    times = preview(
        EverySchedule(timedelta(minutes=5)),
        after=datetime(2026, 1, 1, tzinfo=UTC),
        offset=timedelta(seconds=7),
        count=3,
    )
    assert [t.at.strftime("%H:%M:%S") for t in times] == ["00:00:07", "00:05:07", "00:10:07"]
    assert {t.tz for t in times} == {"UTC"} and not any(t.note for t in times)


def test_one_shot_in_the_past_has_no_fire_time():
    at = AtSchedule(datetime(2026, 1, 1, tzinfo=UTC))
    assert preview(at, after=datetime(2026, 6, 1, tzinfo=UTC), offset=timedelta(0)) == []
    assert len(preview(at, after=datetime(2025, 6, 1, tzinfo=UTC), offset=timedelta(0))) == 1
