"""The admin reached the way an operator reaches it: from /admin/, following the links
and submitting the forms the pages render, with job ids that use every allowed
character (``_`` ``.`` ``-`` digits). Django quotes ``_`` as ``_5F`` in its links, so
every view must unquote what it is given; typed URLs with plain ids would miss that."""

from __future__ import annotations

import re
from datetime import UTC, timedelta
from html.parser import HTMLParser

from django.test import Client
from django.utils import timezone

from nexopoll.models import Delivery, PollState
from nexopoll.runtime.tick import tick_job
from tests.support.outbox import outbox_row

from .conftest import scripted

FEED = "feed_1.news-eu"
OTHER = "x-0.y_z9"


class Page(HTMLParser):
    """The links (href, text, attributes) and forms (action, fields) of one response."""

    def __init__(self, response) -> None:
        super().__init__()
        assert response.status_code == 200, response.status_code
        self.url = response.wsgi_request.path
        self.html = response.content.decode()
        self.links: list[tuple[str, str, dict]] = []
        self.forms: list[tuple[str, dict[str, str]]] = []
        self._a: dict | None = None
        self._text = ""
        self.feed(self.html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a" and "href" in a:
            self._a, self._text = a, ""
        elif tag == "form":
            self.forms.append((a.get("action") or self.url, {}))
        elif tag == "input" and self.forms and a.get("name") and a.get("type") != "submit":
            self.forms[-1][1][a["name"]] = a.get("value") or ""

    def handle_data(self, data):
        if self._a is not None:
            self._text += data

    def handle_endtag(self, tag):
        if tag == "a" and self._a is not None:
            self.links.append((self._a["href"], self._text.strip(), self._a))
            self._a = None

    def link(self, text: str | None = None, **attr: str) -> str:
        for href, label, a in self.links:
            if (text is None or label == text) and all(
                v in (a.get(k) or "").split() or a.get(k) == v for k, v in attr.items()
            ):
                return href
        raise AssertionError(f"no link {text!r} {attr} on {self.url}")

    def form(self, action_part: str) -> tuple[str, dict[str, str]]:
        for action, fields in self.forms:
            if action_part in action:
                return action, fields
        raise AssertionError(f"no form posting to …{action_part} on {self.url}")


def get(client: Client, href: str) -> Page:
    return Page(client.get(href, follow=True))


def submit(client: Client, page: Page, action_part: str, **extra: str) -> Page:
    action, fields = page.form(action_part)
    return Page(client.post(action, {**fields, **extra}, follow=True))


def ticked(cfg, redis_client) -> None:
    cfg.write([scripted(FEED), scripted(OTHER)])
    cfg.reload()
    for item in (1, 2):
        redis_client.rpush(f"test:src:{FEED}", item)
        tick_job(FEED, now=timezone.now())


def test_job_pages_and_buttons_by_their_links(cfg, redis_client, operator):
    ticked(cfg, redis_client)
    client = Client()
    client.force_login(operator)
    jobs = get(client, get(client, "/admin/").link("Jobs"))
    href = jobs.link(FEED)
    assert "/feed_5F1.news-eu/change/" in href
    page = get(client, href)
    assert f"<h1>Job {FEED}</h1>" in page.html or f"Job {FEED}" in page.html
    assert page.html.count('<tr class="np-tick">') == 2 and 'id="job-status">ok<' in page.html
    assert "never fires again" not in page.html and "No ticks recorded yet" not in page.html

    history = get(client, page.link("History"))
    assert f"Change history: {FEED}" in history.html

    paused = submit(client, page, "/do/pause/")
    assert f"Paused {FEED}." in paused.html and PollState.objects.get(job_id=FEED).paused
    resumed = submit(client, paused, "/do/resume/")
    assert f"Resumed {FEED}." in resumed.html and not PollState.objects.get(job_id=FEED).paused
    ran = submit(client, resumed, "/do/run/")
    assert f"Job {FEED}: run queued as task" in ran.html

    confirm = get(client, ran.link("rewind here"))  # the newest tick first: #2
    assert "/feed_5F1.news-eu/rewind/2/" in confirm.url
    back = get(client, confirm.link("No, take me back"))
    assert f"Job {FEED}" in back.html and bytes(PollState.objects.get(job_id=FEED).cursor) == b"2"
    rewound = submit(client, confirm, "/rewind/2/")
    assert f"Job {FEED}: cursor rewound to tick #2." in rewound.html
    assert bytes(PollState.objects.get(job_id=FEED).cursor) == b"1"

    confirm = submit(client, rewound, "/do/reset/")
    assert "These cursors will be cleared" in confirm.html and FEED in confirm.html
    done = submit(client, confirm, "/admin/admin_ext/job/")
    assert f"Reset {FEED}: cursors cleared." in done.html
    assert PollState.objects.get(job_id=FEED).cursor is None


def test_deliveries_by_their_links_newest_first(cfg, redis_client, operator):
    ticked(cfg, redis_client)
    client = Client()
    client.force_login(operator)
    page = get(client, get(client, get(client, "/admin/").link("Jobs")).link(FEED))
    rows = list(Delivery.objects.filter(job_id=FEED).order_by("-created_at", "-id"))
    assert len(rows) == 2
    short = [str(r.id).replace("-", "")[:8] for r in rows]
    shown = re.findall(r'<tr class="np-delivery"><td><a [^>]*><code>(\w+)</code>', page.html)
    assert shown == short
    row_page = get(client, page.link(title=str(rows[0].id)))
    assert str(rows[0].id) in row_page.html and "p.m." not in row_page.html
    assert re.search(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC", row_page.html)
    # the job's link on the delivery page leads back to the job
    assert f"Job {FEED}" in get(client, row_page.link(FEED)).html

    listing = get(client, page.link("All deliveries"))
    assert re.findall(r'<code class="np-id" title="[^"]+">(\w+)</code>', listing.html) == short
    assert "p.m." not in listing.html and "a.m." not in listing.html
    assert str(rows[1].id) in get(client, listing.link(short[1])).html
    assert f"Job {FEED}" in get(client, listing.link(FEED)).html


def test_whole_outbox_is_newest_first(cfg, operator):
    now = timezone.now()
    made = [
        outbox_row(OTHER, at=now, status="dead", created_at=now - timedelta(minutes=m))
        for m in (30, 10, 20)
    ]
    client = Client()
    client.force_login(operator)
    index = get(client, "/admin/")
    listing = get(client, index.link("Deliveries"))
    shown = re.findall(r'<code class="np-id" title="([^"]+)">', listing.html)
    assert shown == [str(d.id) for d in sorted(made, key=lambda d: d.created_at, reverse=True)]
    created = re.findall(
        r'<td class="field-created_col"><span class="np-time" title="([^"]+)">'
        r"([^<]+)</span>",
        listing.html,
    )
    assert [cell for _, cell in created] == [
        d.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        for d in sorted(made, key=lambda d: d.created_at, reverse=True)
    ]
    # a short id as the list shows it finds its row (a prefix of the UUID, on SQLite and PG)
    short = str(made[2].id).replace("-", "")[:8]
    found = get(client, listing.url + f"?q={short}")
    assert re.findall(r'<code class="np-id" title="([^"]+)">', found.html) == [str(made[2].id)]


def test_action_messages_name_the_jobs_and_stay_bounded(cfg, operator):
    ids = [f"feed_{i:02d}.news-eu" for i in range(50)]
    cfg.write([scripted(i) for i in ids])
    cfg.reload()
    client = Client()
    client.force_login(operator)
    jobs = get(client, get(client, "/admin/").link("Jobs"))
    one = Page(
        client.post(jobs.url, {"action": "pause", "_selected_action": [ids[7]]}, follow=True)
    )
    assert f"Paused {ids[7]}." in one.html and "job(s)" not in one.html
    many = Page(client.post(jobs.url, {"action": "resume", "_selected_action": ids}, follow=True))
    assert f"Resumed {ids[0]}, {ids[1]}, {ids[2]} and 47 more." in many.html
    paused = Page(
        client.post(jobs.url, {"action": "pause", "_selected_action": ids[:3]}, follow=True)
    )
    assert f"Paused {ids[0]}, {ids[1]}, {ids[2]}." in paused.html
    runs = Page(client.post(jobs.url, {"action": "run_now", "_selected_action": ids}, follow=True))
    assert f"Runs queued for {ids[0]}, {ids[1]}, {ids[2]} and 47 more;" in runs.html
    assert runs.html.count('class="success"') == 1


def test_paused_column_is_green_when_running_and_red_when_paused(cfg, operator):
    cfg.write([scripted(FEED), scripted(OTHER, paused_on_boot=True)])
    cfg.reload()
    client = Client()
    client.force_login(operator)
    jobs = get(client, get(client, "/admin/").link("Jobs"))
    cells = dict(
        re.findall(
            r'name="_selected_action" value="([^"]+)".*?<td class="field-paused_col">(.*?)</td>',
            jobs.html,
            re.S,
        )
    )
    assert "np-running" in cells[FEED] and "icon-no" not in cells[FEED]
    assert "np-paused" in cells[OTHER] and "icon-yes" not in cells[OTHER]
