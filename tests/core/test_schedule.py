from __future__ import annotations

import doctest
import json
import re
from datetime import UTC, date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
import yaml

from nexopoll.core import schedule as schedule_module
from nexopoll.core.config import load_config
from nexopoll.core.schedule import (
    AT_NOMINAL_INTERVAL,
    AtSchedule,
    CronSchedule,
    EverySchedule,
    Schedule,
    ScheduleError,
    next_run_at,
    next_slot,
    nominal_interval,
    parse_cron,
    schedule_from_dict,
    schedule_to_dict,
    stagger_offset,
)

PARIS = ZoneInfo("Europe/Paris")
BOGOTA = ZoneInfo("America/Bogota")
SYDNEY = ZoneInfo("Australia/Sydney")


def t(y: int, mo: int, d: int, h: int = 0, mi: int = 0, s: int = 0, us: int = 0) -> datetime:
    return datetime(y, mo, d, h, mi, s, us, tzinfo=UTC)


def firings(schedule: Schedule, *, after: datetime, until: datetime) -> list[datetime]:
    found: list[datetime] = []
    cursor: datetime | None = after
    while True:
        cursor = next_run_at(schedule, after=cursor)
        if cursor is None or cursor >= until:
            return found
        found.append(cursor)


def days_of(year: int) -> list[date]:
    first = date(year, 1, 1)
    return [first + timedelta(days=n) for n in range((date(year + 1, 1, 1) - first).days)]


def test_docstring_examples_hold() -> None:
    result = doctest.testmod(schedule_module)
    assert result.attempted > 10
    assert result.failed == 0


# --- every -----------------------------------------------------------------------------


def test_every_slots_are_multiples_of_the_period_since_the_epoch() -> None:
    every = EverySchedule(timedelta(seconds=7))
    slot = next_run_at(every, after=t(2026, 1, 1))
    assert slot is not None
    assert int(slot.timestamp()) % 7 == 0
    assert timedelta(0) < slot - t(2026, 1, 1) <= timedelta(seconds=7)


def test_every_slot_does_not_depend_on_when_you_ask() -> None:
    every = EverySchedule(timedelta(minutes=5))
    asked = [t(2026, 1, 1, 10, 0, 0, 1), t(2026, 1, 1, 10, 2), t(2026, 1, 1, 10, 4, 59, 999999)]
    assert {next_run_at(every, after=a) for a in asked} == {t(2026, 1, 1, 10, 5)}


def test_every_is_strictly_after() -> None:
    every = EverySchedule(timedelta(seconds=60))
    assert next_run_at(every, after=t(2026, 1, 1, 10, 0)) == t(2026, 1, 1, 10, 1)
    assert next_run_at(every, after=t(2026, 1, 1, 9, 59, 59, 999999)) == t(2026, 1, 1, 10, 0)


def test_every_sub_second_and_before_the_epoch() -> None:
    quarter = EverySchedule(timedelta(milliseconds=250))
    after = t(2026, 1, 1, 0, 0, 0, 300000)
    assert next_run_at(quarter, after=after) == t(2026, 1, 1, 0, 0, 0, 500000)
    hourly = EverySchedule(timedelta(hours=1))
    assert next_run_at(hourly, after=t(1969, 12, 31, 22, 30)) == t(1969, 12, 31, 23)


def test_every_answers_in_utc_for_any_aware_input() -> None:
    bogota_morning = datetime(2026, 1, 1, 5, 0, 30, tzinfo=BOGOTA)  # 10:00:30 UTC
    slot = next_run_at(EverySchedule(timedelta(seconds=60)), after=bogota_morning)
    assert slot == t(2026, 1, 1, 10, 1)
    assert slot is not None and slot.tzinfo is UTC


@pytest.mark.parametrize("every", [timedelta(0), timedelta(seconds=-1), 60])
def test_every_must_be_a_positive_timedelta(every: object) -> None:
    with pytest.raises(ScheduleError, match="every must be a positive duration"):
        EverySchedule(every)


@pytest.mark.parametrize(
    "schedule",
    [EverySchedule(timedelta(seconds=1)), CronSchedule("* * * * * *"), AtSchedule(t(2026, 1, 1))],
)
def test_naive_after_is_rejected(schedule: Schedule) -> None:
    with pytest.raises(ValueError, match="aware"):
        next_run_at(schedule, after=datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="aware"):
        next_slot(schedule, after=datetime(2026, 1, 1), offset=timedelta(0))


# --- cron: fields and seconds ------------------------------------------------------------


def test_cron_seconds_come_first() -> None:
    quarter_minutes = CronSchedule("*/15 * * * * *")
    assert firings(quarter_minutes, after=t(2026, 1, 1, 10), until=t(2026, 1, 1, 10, 1, 20)) == [
        t(2026, 1, 1, 10, 0, 15),
        t(2026, 1, 1, 10, 0, 30),
        t(2026, 1, 1, 10, 0, 45),
        t(2026, 1, 1, 10, 1, 0),
        t(2026, 1, 1, 10, 1, 15),
    ]
    # "30" in the first field is second 30 of every minute, not minute 30.
    assert next_run_at(CronSchedule("30 * * * * *"), after=t(2026, 1, 1, 10)) == t(
        2026, 1, 1, 10, 0, 30
    )


def test_cron_is_strictly_after_and_ignores_sub_second_noise() -> None:
    quarter_minutes = CronSchedule("*/15 * * * * *")
    assert next_run_at(quarter_minutes, after=t(2026, 1, 1, 10, 0, 15)) == t(2026, 1, 1, 10, 0, 30)
    after = t(2026, 1, 1, 10, 0, 14, 999999)
    assert next_run_at(quarter_minutes, after=after) == t(2026, 1, 1, 10, 0, 15)
    just_after = t(2026, 1, 1, 10, 0, 15, 1)
    assert next_run_at(quarter_minutes, after=just_after) == t(2026, 1, 1, 10, 0, 30)


def test_cron_every_five_minutes_in_bogota_lands_on_the_boundary() -> None:
    five = CronSchedule("0 */5 * * * *", "America/Bogota")
    assert firings(five, after=t(2026, 4, 26, 15, 1), until=t(2026, 4, 26, 15, 16)) == [
        t(2026, 4, 26, 15, 5),
        t(2026, 4, 26, 15, 10),
        t(2026, 4, 26, 15, 15),
    ]


def test_cron_in_bogota_is_a_fixed_five_hours_behind_utc_all_year() -> None:
    nine_am = CronSchedule("0 0 9 * * *", "America/Bogota")
    fired = firings(nine_am, after=t(2026, 1, 1, 5), until=t(2027, 1, 1, 5))
    assert len(fired) == 365
    assert {(f.hour, f.minute, f.second) for f in fired} == {(14, 0, 0)}
    assert [f.astimezone(BOGOTA).date() for f in fired] == days_of(2026)


def test_cron_weekdays_only() -> None:
    weekdays = CronSchedule("0 0 9 * * mon-fri", "America/Bogota")
    fired = firings(weekdays, after=t(2026, 1, 1), until=t(2026, 1, 15))
    weekdays_fired = [f.astimezone(BOGOTA).date().isoweekday() for f in fired]
    assert weekdays_fired == [4, 5, 1, 2, 3, 4, 5, 1, 2, 3]  # 2026-01-01 is a Thursday


# --- cron: daylight saving time -----------------------------------------------------------


def test_paris_half_past_two_fires_once_on_every_day_of_2026() -> None:
    half_past_two = CronSchedule("0 30 2 * * *", "Europe/Paris")
    fired = firings(half_past_two, after=t(2025, 12, 31, 12), until=t(2026, 12, 31, 12))
    assert [f.astimezone(PARIS).date() for f in fired] == days_of(2026)
    local_times = {f.astimezone(PARIS).strftime("%H:%M") for f in fired}
    assert local_times == {"02:30", "03:00"}  # 03:00 only on the spring-forward day


def test_paris_gap_time_fires_at_the_jump() -> None:
    # 2026-03-29: 02:00 CET jumps to 03:00 CEST at 01:00 UTC; 02:30 does not exist.
    half_past_two = CronSchedule("0 30 2 * * *", "Europe/Paris")
    jump = next_run_at(half_past_two, after=t(2026, 3, 28, 12))
    assert jump == t(2026, 3, 29, 1)
    assert jump.astimezone(PARIS).strftime("%H:%M %Z") == "03:00 CEST"
    assert next_run_at(half_past_two, after=t(2026, 3, 28, 1, 30)) == t(2026, 3, 29, 1)
    assert next_run_at(half_past_two, after=jump) == t(2026, 3, 30, 0, 30)


def test_paris_gap_collapses_every_missing_wall_time_into_one_firing() -> None:
    every_twenty = CronSchedule("0 */20 * * * *", "Europe/Paris")
    # 01:40 CET, then 02:00/02:20/02:40 (missing) and 03:00 CEST all at the jump, once.
    assert firings(every_twenty, after=t(2026, 3, 29, 0, 30), until=t(2026, 3, 29, 1, 30)) == [
        t(2026, 3, 29, 0, 40),
        t(2026, 3, 29, 1, 0),
        t(2026, 3, 29, 1, 20),
    ]


def test_paris_repeated_time_fires_only_at_its_first_occurrence() -> None:
    # 2026-10-25: 03:00 CEST falls back to 02:00 CET at 01:00 UTC; 02:30 happens twice.
    half_past_two = CronSchedule("0 30 2 * * *", "Europe/Paris")
    first = next_run_at(half_past_two, after=t(2026, 10, 24, 12))
    assert first == t(2026, 10, 25, 0, 30)
    assert first.astimezone(PARIS).strftime("%H:%M %Z") == "02:30 CEST"
    second_occurrence = t(2026, 10, 25, 1, 30)
    fired = firings(half_past_two, after=t(2026, 10, 24, 12), until=t(2026, 10, 27))
    assert second_occurrence not in fired
    assert fired == [t(2026, 10, 25, 0, 30), t(2026, 10, 26, 1, 30)]


def test_paris_repeated_hour_is_not_run_again_from_its_second_pass() -> None:
    every_twenty = CronSchedule("0 */20 * * * *", "Europe/Paris")
    assert firings(every_twenty, after=t(2026, 10, 25, 0), until=t(2026, 10, 25, 2, 30)) == [
        t(2026, 10, 25, 0, 20),  # 02:20 CEST
        t(2026, 10, 25, 0, 40),  # 02:40 CEST
        t(2026, 10, 25, 2, 0),  # 03:00 CET; the CET 02:xx repeats are skipped
        t(2026, 10, 25, 2, 20),
    ]
    second_pass = t(2026, 10, 25, 1, 10)  # 02:10 CET, the second time round
    assert next_run_at(every_twenty, after=second_pass) == t(2026, 10, 25, 2)
    every_second = CronSchedule("* * * * * *", "Europe/Paris")
    assert next_run_at(every_second, after=second_pass) == t(2026, 10, 25, 2)
    assert next_run_at(every_second, after=t(2026, 10, 25, 0, 59, 59)) == t(2026, 10, 25, 2)


def test_sydney_half_past_two_fires_once_on_every_day_of_2026() -> None:
    # Southern hemisphere: falls back on 2026-04-05, springs forward on 2026-10-04.
    half_past_two = CronSchedule("0 30 2 * * *", "Australia/Sydney")
    fired = firings(half_past_two, after=t(2025, 12, 31), until=t(2026, 12, 31))
    assert [f.astimezone(SYDNEY).date() for f in fired] == days_of(2026)


def test_a_whole_skipped_day_fires_once_at_the_jump() -> None:
    # Samoa moved across the date line: 2011-12-29 24:00 (-10) became 2011-12-31 00:00 (+14).
    noon = CronSchedule("0 0 12 * * *", "Pacific/Apia")
    assert firings(noon, after=t(2011, 12, 29), until=t(2011, 12, 31)) == [
        t(2011, 12, 29, 22),  # 29th noon, -10
        t(2011, 12, 30, 10),  # the 30th never happened: fires at the jump
        t(2011, 12, 30, 22),  # 31st noon, +14
    ]


# --- cron: validation -----------------------------------------------------------------------


_SIX = "expected 6 fields (sec min hour dom mon dow)"


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("61 * * * *", f"invalid cron expression '61 * * * *': {_SIX}, got 5"),
        ("* * *", f"invalid cron expression '* * *': {_SIX}, got 3"),
        ("0 0 0 * * * 2026", f"{_SIX}, got 7"),
        ("@daily", f"{_SIX}, got 1"),
        ("0 61 * * * *", "invalid cron expression '0 61 * * * *': bad minute field '61'"),
        ("60 * * * * *", "bad second field '60'"),
        ("0 0 24 * * *", "bad hour field '24'"),
        ("0 0 0 32 * *", "bad day-of-month field '32'"),
        ("0 0 0 * 13 *", "bad month field '13'"),
        ("0 0 0 * * 8", "bad day-of-week field '8'"),
        ("0 0 0 * * 5#6", "bad day-of-week field '5#6'"),
        ("abc * * * * *", "bad second field 'abc'"),
        ("R * * * * *", "second field 'R' uses H/R, which is not deterministic"),
        ("0 H * * * *", "minute field 'H' uses H/R"),
        ("0 0 9 * * R(1-5)", "day-of-week field 'R(1-5)' uses H/R"),
    ],
)
def test_invalid_cron_is_rejected_naming_the_field(expr: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=re.escape(message)):
        parse_cron(expr, "UTC", now=t(2026, 1, 1))


def test_day_and_month_names_are_not_mistaken_for_h_or_r() -> None:
    schedule = parse_cron("0 0 9 * mar,apr thu,fri", "UTC", now=t(2026, 1, 1))
    assert next_run_at(schedule, after=t(2026, 1, 1)) == t(2026, 3, 5, 9)  # first Thursday


@pytest.mark.parametrize("tz", ["Mars/Olympus", "../etc/passwd", "", "utc+5"])
def test_unknown_time_zone_is_rejected(tz: str) -> None:
    with pytest.raises(ScheduleError, match="unknown time zone"):
        parse_cron("0 0 9 * * *", tz, now=t(2026, 1, 1))
    with pytest.raises(ScheduleError, match="unknown time zone 'Mars/Olympus'"):
        CronSchedule("0 0 9 * * *", "Mars/Olympus")


@pytest.mark.parametrize("expr", ["0 0 0 31 2 *", "0 0 0 30 2 *", "0 0 0 31 4,6,9,11 *"])
def test_cron_that_never_fires_is_rejected(expr: str) -> None:
    with pytest.raises(ScheduleError) as raised:
        parse_cron(expr, "Europe/Paris", now=t(2026, 1, 1))
    assert str(raised.value) == f"cron expression '{expr}' never fires"
    assert next_run_at(CronSchedule(expr), after=t(2026, 1, 1)) is None


def test_rare_but_real_cron_is_accepted_and_skips_2100() -> None:
    leap_day = parse_cron("0 0 0 29 2 *", "UTC", now=t(2097, 3, 1))
    assert next_run_at(leap_day, after=t(2097, 3, 1)) == t(2104, 2, 29)


def test_parse_cron_returns_the_schedule_and_needs_an_aware_now() -> None:
    assert parse_cron("0 */5 * * * *", "America/Bogota", now=t(2026, 1, 1)) == CronSchedule(
        "0 */5 * * * *", "America/Bogota"
    )
    with pytest.raises(ValueError, match="aware"):
        parse_cron("0 */5 * * * *", "UTC", now=datetime(2026, 1, 1))


# --- at ----------------------------------------------------------------------------------


def test_at_fires_once_then_never() -> None:
    once = AtSchedule(t(2026, 4, 26, 15))
    assert next_run_at(once, after=t(2026, 4, 26, 14, 59, 59)) == t(2026, 4, 26, 15)
    assert next_run_at(once, after=t(2026, 4, 26, 15)) is None
    assert next_run_at(once, after=t(2026, 4, 27)) is None


def test_at_is_stored_in_utc_and_must_be_aware() -> None:
    once = AtSchedule(datetime(2026, 4, 26, 10, tzinfo=BOGOTA))
    assert once.at == t(2026, 4, 26, 15)
    assert once.at.tzinfo is UTC
    with pytest.raises(ScheduleError, match="aware"):
        AtSchedule(datetime(2026, 4, 26, 15))


# --- stagger and next_slot ---------------------------------------------------------------


def test_stagger_is_deterministic_and_pinned() -> None:
    every = EverySchedule(timedelta(seconds=60))
    jitter = timedelta(seconds=2)
    first = stagger_offset("ana_leads", jitter, every)
    assert [stagger_offset("ana_leads", jitter, every) for _ in range(3)] == [first] * 3
    # Pinned: changing the hash would move every job's slot on upgrade.
    assert first == timedelta(milliseconds=1035)
    assert stagger_offset("kate_solicitud_llamada", jitter, every) == timedelta(milliseconds=1419)


def test_stagger_spreads_a_herd_across_the_jitter() -> None:
    every = EverySchedule(timedelta(seconds=60))
    jitter = timedelta(seconds=2)
    offsets = [stagger_offset(f"job_{n}", jitter, every) for n in range(800)]
    assert all(timedelta(0) <= o < jitter for o in offsets)
    assert all(o % timedelta(milliseconds=1) == timedelta(0) for o in offsets)
    assert len(set(offsets)) > 600
    quarters = [sum(1 for o in offsets if o // timedelta(milliseconds=500) == q) for q in range(4)]
    assert min(quarters) > 150


def test_stagger_stays_below_the_interval() -> None:
    jitter = timedelta(seconds=30)
    every_second = EverySchedule(timedelta(seconds=1))
    offsets = [stagger_offset(f"job_{n}", jitter, every_second) for n in range(300)]
    assert all(o < timedelta(seconds=1) for o in offsets)
    assert max(offsets) > timedelta(milliseconds=900)  # still spread over the whole second
    quarter_minute = CronSchedule("*/15 * * * * *")
    cron_offsets = [
        stagger_offset(f"job_{n}", timedelta(minutes=5), quarter_minute) for n in range(300)
    ]
    assert all(o < timedelta(seconds=15) for o in cron_offsets)
    assert max(cron_offsets) > timedelta(seconds=14)


def test_no_stagger_for_at_zero_jitter_or_tiny_intervals() -> None:
    every = EverySchedule(timedelta(seconds=60))
    once = AtSchedule(t(2026, 1, 1))
    assert stagger_offset("ana_leads", timedelta(seconds=5), once) == timedelta(0)
    assert stagger_offset("ana_leads", timedelta(0), every) == timedelta(0)
    assert stagger_offset("ana_leads", timedelta(seconds=-1), every) == timedelta(0)
    assert stagger_offset("ana_leads", timedelta(microseconds=900), every) == timedelta(0)


def test_next_slot_shifts_the_schedule_by_the_offset() -> None:
    every = EverySchedule(timedelta(seconds=60))
    offset = timedelta(milliseconds=1035)
    slot = t(2026, 1, 1, 10, 0, 1, 35000)
    assert next_slot(every, after=t(2026, 1, 1, 10), offset=offset) == slot
    assert next_slot(every, after=slot, offset=offset) == slot + timedelta(seconds=60)
    assert next_slot(every, after=slot - timedelta(microseconds=1), offset=offset) == slot
    daily = CronSchedule("0 30 2 * * *", "Europe/Paris")
    assert next_slot(daily, after=t(2026, 3, 28, 12), offset=offset) == t(2026, 3, 29, 1) + offset


def test_next_slot_of_a_past_at_is_none() -> None:
    once = AtSchedule(t(2026, 4, 26, 15))
    assert next_slot(once, after=t(2026, 4, 26, 14), offset=timedelta(0)) == t(2026, 4, 26, 15)
    assert next_slot(once, after=t(2026, 4, 26, 15), offset=timedelta(0)) is None


# --- nominal_interval ----------------------------------------------------------------------


def test_nominal_interval() -> None:
    now = t(2026, 1, 1)
    assert nominal_interval(EverySchedule(timedelta(seconds=90)), now=now) == timedelta(seconds=90)
    assert nominal_interval(AtSchedule(t(2026, 5, 1)), now=now) == AT_NOMINAL_INTERVAL
    assert AT_NOMINAL_INTERVAL == timedelta(seconds=60)
    assert nominal_interval(CronSchedule("*/15 * * * * *"), now=now) == timedelta(seconds=15)
    assert nominal_interval(CronSchedule("0 0 9,17 * * *"), now=now) == timedelta(hours=8)
    weekdays = CronSchedule("0 0 9 * * mon-fri")
    assert nominal_interval(weekdays, now=t(2026, 1, 2)) == timedelta(days=1)
    assert nominal_interval(CronSchedule("0 0 0 31 2 *"), now=now) == AT_NOMINAL_INTERVAL


def test_nominal_interval_of_a_daily_cron_shrinks_across_spring_forward() -> None:
    daily = CronSchedule("0 30 2 * * *", "Europe/Paris")
    assert nominal_interval(daily, now=t(2026, 3, 28, 12)) == timedelta(hours=23, minutes=30)
    assert nominal_interval(daily, now=t(2026, 6, 1)) == timedelta(days=1)


# --- dict form ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "schedule",
    [
        EverySchedule(timedelta(seconds=60)),
        EverySchedule(timedelta(seconds=1)),
        EverySchedule(timedelta(seconds=1, microseconds=1)),
        EverySchedule(timedelta(days=7, microseconds=123456)),
        CronSchedule("0 */5 * * * *", "America/Bogota"),
        CronSchedule("*/15 * * * * *"),
        AtSchedule(t(2026, 4, 26, 15)),
        AtSchedule(t(2026, 4, 26, 15, 0, 0, 123456)),
        AtSchedule(datetime(2026, 4, 26, 17, tzinfo=timezone(timedelta(hours=2)))),
    ],
)
def test_dict_form_round_trips_through_json(schedule: Schedule) -> None:
    as_json = json.dumps(schedule_to_dict(schedule))
    assert schedule_from_dict(json.loads(as_json)) == schedule
    assert schedule_to_dict(schedule_from_dict(json.loads(as_json))) == json.loads(as_json)


def test_dict_form_shapes() -> None:
    assert schedule_to_dict(EverySchedule(timedelta(seconds=60))) == {"every_secs": 60.0}
    assert schedule_to_dict(CronSchedule("0 0 9 * * *")) == {"cron": "0 0 9 * * *", "tz": "UTC"}
    bogota = AtSchedule(datetime(2026, 4, 26, 10, tzinfo=BOGOTA))
    assert schedule_to_dict(bogota) == {"at": "2026-04-26T15:00:00Z"}


def test_dict_form_accepts_what_yaml_gives() -> None:
    assert schedule_from_dict({"every_secs": 60}) == EverySchedule(timedelta(seconds=60))
    assert schedule_from_dict({"cron": "0 0 9 * * *"}) == CronSchedule("0 0 9 * * *", "UTC")
    assert schedule_from_dict({"at": "2026-04-26T10:00:00-05:00"}) == AtSchedule(t(2026, 4, 26, 15))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, "exactly one of every_secs, cron, at"),
        ({"every_secs": 60, "cron": "* * * * * *"}, "exactly one of"),
        ({"every_secs": 60, "stagger_jitter_ms": 10}, "unknown field"),
        ({"every_secs": 60, "tz": "UTC"}, "tz is only valid with cron"),
        ({"every_secs": 0}, "at least 1 second"),
        ({"every_secs": -5}, "at least 1 second"),
        ({"every_secs": 0.000001}, "at least 1 second"),
        ({"every_secs": 0.999999}, "at least 1 second"),
        ({"every_secs": float("nan")}, "finite"),
        ({"every_secs": float("inf")}, "finite"),
        ({"every_secs": 1e-9}, "at least 1 second"),
        ({"every_secs": 10**20}, "less than or equal to 31622400"),
        ({"every_secs": True}, "must be a number"),
        ({"every_secs": "60"}, "must be a number"),
        ({"cron": "* * * * *"}, "expected 6 fields"),
        ({"cron": 5}, "expected a string"),
        ({"cron": "* * * * * *", "tz": 5}, "unknown time zone 5"),
        ({"cron": "* * * * * *", "tz": "Nowhere/Town"}, "unknown time zone 'Nowhere/Town'"),
        ({"at": "2026-04-26T15:00:00"}, "no UTC offset"),
        ({"at": "next tuesday"}, "RFC3339"),
        ({"at": 1777215600}, "RFC3339"),
        ([("every_secs", 60)], "must be a mapping"),
    ],
)
def test_dict_form_rejects_bad_input(raw: object, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        schedule_from_dict(raw)


# --- one strict path: pollers.yaml and the DB copy are read by the same function ---------

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"at": "2026-04-26T15:00:00+0000"}, "at"),  # offset without a colon: not RFC3339
        ({"at": "20260426T150000Z"}, "at"),  # ISO basic format
        ({"at": "2026-W17-7T15:00:00Z"}, "at"),  # ISO week date
        ({"at": "2026-04-26T15:00:0\u0662Z"}, "at"),  # an Arabic-indic digit
        ({"at": t(2026, 4, 26, 15)}, "at"),  # only YAML's string, never a datetime
        ({"every_secs": 10**9}, "every_secs"),  # past the 366-day cap
        ({"every_secs": 60, "tz": "UTC"}, "tz"),
        ({"every_secs": 60, "every": 5}, "every"),
        ({"cron": "0 0 0 31 2 *"}, "cron"),  # never fires (checked when now is given)
    ],
)
def test_schedule_from_dict_is_the_strict_loader_path(raw: dict, field: str) -> None:
    """The DB path used to accept forms the YAML loader refused (and the reverse)."""
    with pytest.raises(ScheduleError) as raised:
        schedule_from_dict(raw, now=NOW)
    assert raised.value.field == field


@pytest.mark.parametrize(
    "text",
    [
        "{every_secs: 60}",
        "{every_secs: 1.5}",
        "{every_secs: 100000000}",
        "{every_secs: 60, tz: UTC}",
        "{cron: '0 */5 * * * *', tz: America/Bogota}",
        "{cron: '0 0 0 31 2 *'}",
        "{at: '2026-04-26T15:00:00+0000'}",
        "{at: '2026-04-26T15:00:00Z'}",
        "{at: 20260426T150000Z}",
    ],
)
def test_yaml_loader_and_db_reader_agree(text: str) -> None:
    doc = f"pollers:\n  jobs:\n    - {{id: j, kind: k, agent: a, schedule: {text}}}\n"
    loaded = load_config(doc, source="p", env={}, now=NOW, validators={"k": lambda c: None})
    raw = yaml.safe_load(text)
    try:
        direct = schedule_from_dict(raw, now=NOW)
    except ScheduleError:
        direct = None
    assert ("j" in loaded.jobs) == (direct is not None)
    if direct is not None:
        stored = schedule_to_dict(loaded.jobs["j"].schedule)
        assert schedule_from_dict(stored) == direct == loaded.jobs["j"].schedule


@pytest.mark.parametrize("secs", [1, 1.0, 1.5, 60, 86_400])
def test_every_secs_from_the_one_second_floor_up_is_accepted(secs: float) -> None:
    assert schedule_from_dict({"every_secs": secs}) == EverySchedule(timedelta(seconds=secs))
