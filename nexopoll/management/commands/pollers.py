"""``manage.py pollers list|show|run|pause|resume|reset|reload|check|deliveries|redeliver|mcp``."""

from __future__ import annotations

import json
from typing import Any

from django.core.checks.registry import registry
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from nexopoll import services
from nexopoll.core.extras import MissingExtra, require


class Command(BaseCommand):
    help = "Inspect and control poll jobs (the YAML owns definitions; this controls them)."

    def get_check_kwargs(self, options: dict[str, Any]) -> dict[str, Any]:
        """``reload`` and ``check`` validate pollers.yaml and report its problems
        themselves: the system check's copy of that would parse it a second time
        (seconds for 100,000 jobs) to print the same problems as warnings."""
        kwargs = super().get_check_kwargs(options)
        if options.get("verb") in ("reload", "check"):
            kwargs["tags"] = sorted(registry.tags_available() - {"nexopoll"})
        return kwargs

    def add_arguments(self, parser: CommandParser) -> None:
        if parser.prog == "nexopoll pollers":  # the `nexopoll` console script
            parser.prog = "nexopoll"
        sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
        p = sub.add_parser("list", help="every job with its state")
        p.add_argument("--json", action="store_true")
        p = sub.add_parser("show", help="one job in detail")
        p.add_argument("job_id")
        p.add_argument("--json", action="store_true")
        p = sub.add_parser("run", help="tick now, bypassing schedule and lease")
        p.add_argument("job_id")
        p.add_argument("--dry-run", action="store_true", help="commit nothing; show what would be")
        p.add_argument("--force", action="store_true", help="tick even if the job is paused")
        p.add_argument("--json", action="store_true")
        sub.add_parser("pause", help="stop ticking a job (state kept)").add_argument("job_id")
        sub.add_parser("resume", help="tick a paused job again (errors cleared)").add_argument(
            "job_id"
        )
        p = sub.add_parser("reset", help="clear cursor, errors and breaker (destructive)")
        p.add_argument("job_id")
        p.add_argument("--yes", action="store_true", help="confirm")
        p = sub.add_parser("reload", help="re-read pollers.yaml and apply the diff")
        p.add_argument("--dry-run", action="store_true")
        p.add_argument("--strict", action="store_true", help="refuse the reload on any error")
        p.add_argument("--json", action="store_true")
        sub.add_parser("check", help="validate pollers.yaml and the Redis set-up")
        p = sub.add_parser("import-legacy", help="translate a legacy gmail-poller.yaml")
        p.add_argument("path", help="the legacy config/plugins/gmail-poller.yaml")
        p.add_argument("--write", action="store_true", help="merge into NEXOPOLL_CONFIG")
        p = sub.add_parser("preview", help="next fire times in the job's zone and UTC, DST flagged")
        p.add_argument("job_id")
        p.add_argument("--count", type=int, default=10)
        p.add_argument("--json", action="store_true")
        p = sub.add_parser("history", help="the job's recent ticks (newest first)")
        p.add_argument("job_id")
        p.add_argument("--limit", type=int, default=20)
        p.add_argument("--json", action="store_true")
        p = sub.add_parser("rewind", help="restore the cursor a past tick started from")
        p.add_argument("job_id")
        p.add_argument("--to", type=int, required=True, metavar="TICK", help="a tick's number")
        p.add_argument("--yes", action="store_true", help="confirm")
        p = sub.add_parser("deliveries", help="outbox rows, newest first")
        p.add_argument("--status", choices=services.DELIVERY_STATUSES)
        p.add_argument("--job", metavar="ID")
        p.add_argument("--limit", type=int, default=50)
        p.add_argument("--json", action="store_true")
        p = sub.add_parser("redeliver", help="queue dead or held rows again (attempts reset)")
        p.add_argument("row_ids", nargs="*", metavar="ROW_ID")
        p.add_argument("--job", metavar="ID", help="every --dead and/or --held row of a job")
        p.add_argument("--dead", action="store_true")
        p.add_argument("--held", action="store_true")
        p.add_argument("--force", action="store_true", help="also re-send rows already sent")
        p.add_argument("--json", action="store_true")
        p = sub.add_parser("plugins", help="subprocess plugins: manifests, kinds and state")
        p.add_argument("--json", action="store_true")
        p = sub.add_parser("mcp", help="serve the LLM tools over MCP on stdio")
        p.add_argument("--agent", help="scope the tools to this agent's jobs")

    def handle(self, *args: Any, **opts: Any) -> None:
        verb = opts["verb"]
        try:
            getattr(self, f"do_{verb.replace('-', '_')}")(**opts)
        except services.ServiceError as exc:  # every refusal of every verb
            raise CommandError(exc.text) from None

    def _json(self, data: Any) -> None:
        self.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str))

    def do_list(self, **opts: Any) -> None:
        jobs = services.list_jobs(now=timezone.now())
        if opts["json"]:
            return self._json(jobs)
        rows = [
            (
                "ID",
                "KIND",
                "AGENT",
                "STATUS",
                "PAUSED",
                "ERRORS",
                "BREAKER",
                "LAST RUN (UTC)",
                "NEXT (UTC)",
            )
        ]
        for j in jobs:
            rows.append(
                (
                    j["id"],
                    j["kind"],
                    j["agent"],
                    j.get("status", "-"),
                    "yes" if j.get("paused") else "no",
                    str(j.get("consecutive_errors", 0)),
                    j.get("breaker", "-"),
                    (j.get("last_run_at") or "-")[:19],
                    "paused" if j.get("paused") else (j.get("next_run_at") or "-")[:19],
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for r in rows:
            self.stdout.write(
                "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            )
        if len(rows) == 1:
            self.stdout.write("(no jobs: run `nexopoll reload`)")
        for j in jobs:  # what a poller asked operators to know (an automatic re-baseline…)
            if j.get("notice"):
                self.stdout.write(f"notice {j['id']} {(j['notice_at'] or '')[:19]}: {j['notice']}")

    def do_show(self, job_id: str, **opts: Any) -> None:
        view = services.show_job(job_id, now=timezone.now())
        if opts["json"]:
            return self._json(view)
        for key in sorted(view):
            self.stdout.write(f"{key:24} {json.dumps(view[key], default=str)}")

    def do_run(self, job_id: str, **opts: Any) -> None:
        report = services.run_job(
            job_id, now=timezone.now(), dry_run=opts["dry_run"], force=opts["force"]
        )
        data = services.run_view(report, dry_run=opts["dry_run"])  # masked
        if opts["json"]:
            self._json(data)
        else:
            head = "dry run (nothing committed)" if opts["dry_run"] else "tick"
            self.stdout.write(
                f"{head}: {data['status']}  seen={data['items_seen']} "
                f"dispatched={data['items_dispatched']}"
                + (f"  error: {data['error']}" if data["error"] else "")
            )
            for d in data["deliveries"]:
                self.stdout.write(
                    f"  → {d['channel']}:{d['to']} {json.dumps(d['payload'], ensure_ascii=False)}"
                )
            if data["next_cursor"] is None:
                current = services.show_job(job_id, now=timezone.now())["cursor"]
                self.stdout.write(f"  next cursor: unchanged ({current or 'no cursor yet'})")
            else:
                self.stdout.write(f"  next cursor: {data['next_cursor']}")
        if report.status not in ("ok", "skipped"):
            raise CommandError(
                f"tick of {job_id} ended {data['status']}: {data['error'] or data['reason']}"
            )

    def do_pause(self, job_id: str, **opts: Any) -> None:
        services.pause_job(job_id)
        self.stdout.write(f"paused {job_id}")

    def do_resume(self, job_id: str, **opts: Any) -> None:
        services.resume_job(job_id)
        self.stdout.write(f"resumed {job_id}")

    def do_reset(self, job_id: str, **opts: Any) -> None:
        if not opts["yes"]:
            raise CommandError(f"reset clears the cursor of {job_id}: confirm with --yes")
        services.reset_job(job_id)
        self.stdout.write(f"reset {job_id}: cursor, errors and breaker cleared")

    def do_reload(self, **opts: Any) -> None:
        res = services.reload_config(
            now=timezone.now(),
            dry_run=opts["dry_run"],
            strict=opts["strict"],
            progress=self.stderr.write,  # a big reload's steps, as they end
        )
        if opts["json"]:
            self._json(res.as_dict())
            return self._fail_on_issues(res)
        self.stdout.write(f"{'plan' if opts['dry_run'] else 'applied'} ({res.source}):")
        for name in ("add", "replace", "remove", "keep", "kept_invalid", "resumed"):
            ids = getattr(res, name)
            self.stdout.write(
                f"  {name:13} {len(ids):5}  {', '.join(ids[:20])}{' …' if len(ids) > 20 else ''}"
            )
        for warning in res.warnings:
            self.stderr.write(f"  warning: {warning}")
        for issue in res.issues:
            self.stderr.write(f"  rejected: {issue}")
        self._fail_on_issues(res)

    @staticmethod
    def _fail_on_issues(res: services.ReloadResult) -> None:
        """Exit non-zero when anything was rejected (the rest was applied)."""
        if res.issues:
            raise CommandError(
                f"{len(res.issues)} problem(s) in {res.source}: the rejected jobs and agents "
                "keep their last good definitions"
            )

    def do_check(self, **opts: Any) -> None:
        from nexopoll.checks import run_checks

        plugin_errors = _plugin_problems()
        try:
            errors, warnings = run_checks(now=timezone.now())
        except RuntimeError as exc:  # the registry cannot be built: bad plugins say why
            errors, warnings = [] if plugin_errors else [str(exc)], []
            warnings.append("pollers.yaml not checked: fix the plugin manifests first")
        errors += plugin_errors
        for w in warnings:
            self.stdout.write(f"warning: {w}")
        for e in errors:
            self.stderr.write(f"error: {e}")
        if errors:
            raise CommandError(f"{len(errors)} problem(s) found")
        self.stdout.write("ok: pollers.yaml valid, Redis reachable")

    def do_import_legacy(self, path: str, **opts: Any) -> None:
        _optional("ruamel.yaml", "legacy", "nexopoll import-legacy")
        from nexopoll.legacy_import import import_legacy_command

        import_legacy_command(self, path, write=opts["write"])

    def do_preview(self, job_id: str, **opts: Any) -> None:
        times = services.preview_job(job_id, now=timezone.now(), count=opts["count"])
        if opts["json"]:
            return self._json([t.as_dict() for t in times])
        if not times:
            self.stdout.write(f"{job_id} never fires again")
        for t in times:
            local = t.local.strftime("%Y-%m-%d %H:%M:%S %Z")
            utc = t.at.strftime("%Y-%m-%d %H:%M:%S UTC")
            self.stdout.write(f"{local:32} {utc}" + (f"  ! {t.note}" if t.note else ""))

    def do_history(self, job_id: str, **opts: Any) -> None:
        entries = services.tick_history(job_id, opts["limit"])
        if opts["json"]:
            return self._json([e.as_dict() for e in entries])
        if not entries:
            self.stdout.write(f"no ticks of {job_id} recorded yet")
        for e in entries:
            self.stdout.write(
                f"#{e.n:<6} {e.at:%Y-%m-%d %H:%M:%S} UTC  {e.status:9} "
                f"{(str(e.ms) + ' ms') if e.ms is not None else '-':>8}  seen={e.seen} "
                f"sent={e.dispatched}" + (f"  {e.error or e.reason}" if e.error or e.reason else "")
            )

    def do_rewind(self, job_id: str, **opts: Any) -> None:
        if not opts["yes"]:
            raise CommandError(
                f"rewind replaces the cursor of {job_id} with the one tick {opts['to']} "
                "started from: confirm with --yes"
            )
        done = services.rewind_job(job_id, tick=opts["to"], actor="cli")
        self.stdout.write(
            f"rewound {job_id} to tick #{done.tick} ({done.tick_at:%Y-%m-%d %H:%M:%S} UTC): "
            f"cursor {services.redact(services.cursor_text(done.cursor), [job_id]) or 'cleared'}"
        )

    def do_deliveries(self, **opts: Any) -> None:
        rows = services.list_deliveries(
            status=opts["status"], job_id=opts["job"], limit=opts["limit"]
        )
        if opts["json"]:
            return self._json(rows)
        table = [
            ("ID", "JOB", "CHANNEL", "RECIPIENT", "STATUS", "ATTEMPTS", "NEXT ATTEMPT", "ERROR")
        ]
        for r in rows:
            error = " ".join(r["last_error"].split())
            table.append(
                (
                    r["id"],
                    r["job_id"],
                    r["channel"],
                    r["recipient"][:40],
                    r["status"],
                    str(r["attempts"]),
                    (r["next_attempt_at"] or "-")[:19]
                    if r["status"] in ("pending", "held")
                    else "-",
                    error[:80] + ("…" if len(error) > 80 else ""),
                )
            )
        widths = [max(len(t[i]) for t in table) for i in range(len(table[0]))]
        for t in table:
            self.stdout.write(
                "  ".join(c.ljust(w) for c, w in zip(t, widths, strict=True)).rstrip()
            )
        if not rows:
            self.stdout.write("(no deliveries)")
        elif len(rows) == opts["limit"]:
            self.stdout.write(f"(the newest {len(rows)}: raise --limit for more)")

    def do_redeliver(self, **opts: Any) -> None:
        if opts["row_ids"] and (opts["dead"] or opts["held"]):
            raise CommandError("--dead and --held select the rows of --job; not with row ids")
        ids = services.redeliver(
            opts["row_ids"],
            job_id=opts["job"],
            dead=opts["dead"],
            held=opts["held"],
            force=opts["force"],
            now=timezone.now(),
        )
        if opts["json"]:
            return self._json({"requeued": ids})
        self.stdout.write(f"requeued {len(ids)} row(s)" + "".join(f"\n  {i}" for i in ids))

    def do_plugins(self, **opts: Any) -> None:
        from django.conf import settings

        plugins_dir = settings.NEXOPOLL_PLUGINS_DIR
        found = services.kinds.plugin_rows()
        if opts["json"]:
            return self._json(found)
        if not found:
            self.stdout.write(f"(no plugin manifests in {plugins_dir})")
        for r in found:
            running = r.get("ticks_running")
            busy = f"  running={running}/{r['max_concurrent_ticks']}" if running is not None else ""
            self.stdout.write(
                f"{r['id'] or '?'}  {r['lifecycle'] or '-'}  kinds={','.join(r['kinds']) or '-'}"
                f"{busy}  {r['state']}\n    {r['path']}"
            )
        if any(r["state"] != "ok" for r in found):
            raise CommandError("some plugin manifests are invalid")

    def do_mcp(self, **opts: Any) -> None:
        """The LLM tools over the Model Context Protocol (stdio: nothing else on stdout)."""
        _optional("mcp", "mcp", "nexopoll mcp")
        from nexopoll.llm_tools.mcp_server import serve

        serve(agent=opts["agent"])


def _optional(module: str, extra: str, needed_by: str) -> None:
    """A verb's optional dependency (an extra), or the command fails naming the extra."""
    try:
        require(module, extra, needed_by)
    except MissingExtra as exc:
        raise CommandError(str(exc)) from None


def _plugin_problems() -> list[str]:
    return services.kinds.plugin_problems()
