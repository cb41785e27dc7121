"""Who paused a job (``paused_by``) and the notice a poller raised (``notice``, ``notice_at``)."""

from django.db import migrations, models


def who_paused(apps, schema_editor):
    """Rows paused before the column existed: read who paused them off their reason."""
    PollState = apps.get_model("nexopoll", "PollState")
    for prefix, by in (
        ("permanent error:", "error"),
        ("config error:", "error"),
        ("paused_on_boot", "boot"),
        ("one-shot schedule fired", "schedule"),
    ):
        PollState.objects.filter(
            paused=True, paused_by="", paused_reason__startswith=prefix
        ).update(paused_by=by)
    PollState.objects.filter(paused=True, paused_by="").update(paused_by="operator")


class Migration(migrations.Migration):
    dependencies = [
        ("nexopoll", "0003_job_host_limits"),
    ]

    operations = [
        migrations.AddField(
            model_name="pollstate",
            name="paused_by",
            field=models.CharField(blank=True, default="", max_length=16),
        ),
        migrations.AddField(
            model_name="pollstate",
            name="notice",
            field=models.TextField(blank=True, default=""),
        ),
        migrations.AddField(
            model_name="pollstate",
            name="notice_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(who_paused, migrations.RunPython.noop),
    ]
