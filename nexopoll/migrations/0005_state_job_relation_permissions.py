"""``PollState.job``: the state row's job id becomes a relation to ``PollJob`` (no
database constraint, no schema change: the column stays ``job_id``, the primary key);
and the front-ends' permissions are declared on nexopoll's own models.

Users and groups granted the admin's permissions (``admin_ext.operate_job`` and the
others on its proxy models) are granted the same ones on nexopoll's models here.
"""

import django.db.models.deletion
from django.db import migrations, models

#: admin_ext's (codename, proxy model) → nexopoll's (codename, model)
SAME = {
    ("view_job", "job"): ("view_polljob", "polljob"),
    ("operate_job", "job"): ("operate_job", "polljob"),
    ("reload_config", "job"): ("reload_config", "polljob"),
    ("view_outboxrow", "outboxrow"): ("view_delivery", "delivery"),
    ("redeliver", "outboxrow"): ("redeliver", "delivery"),
}
NAMES = {
    "view_polljob": "Can view poll job",
    "operate_job": "Can pause, resume, reset, rewind, run and dry-run jobs",
    "reload_config": "Can apply a reload of pollers.yaml",
    "view_delivery": "Can view delivery",
    "redeliver": "Can redeliver dead or held deliveries",
}


def copy_grants(apps, schema_editor):
    Permission = apps.get_model("auth", "Permission")
    ContentType = apps.get_model("contenttypes", "ContentType")
    Group = apps.get_model("auth", "Group")
    old = Permission.objects.filter(content_type__app_label="admin_ext")
    for perm in old.select_related("content_type"):
        target = SAME.get((perm.codename, perm.content_type.model))
        if target is None:
            continue
        codename, model = target
        ct, _ = ContentType.objects.get_or_create(app_label="nexopoll", model=model)
        new, _ = Permission.objects.get_or_create(
            content_type=ct, codename=codename, defaults={"name": NAMES[codename]}
        )
        for group in Group.objects.filter(permissions=perm):
            group.permissions.add(new)
        users = perm.user_set.all() if hasattr(perm, "user_set") else []
        for user in users:
            user.user_permissions.add(new)


class Migration(migrations.Migration):
    dependencies = [
        ("nexopoll", "0004_state_paused_by_notice"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(model_name="pollstate", name="job_id"),
                migrations.AddField(
                    model_name="pollstate",
                    name="job",
                    field=models.OneToOneField(
                        db_column="job_id",
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        primary_key=True,
                        related_name="state",
                        serialize=False,
                        to="nexopoll.polljob",
                    ),
                    preserve_default=False,
                ),
            ],
            database_operations=[],  # the column, its type and the primary key stay
        ),
        migrations.AlterModelOptions(
            name="polljob",
            options={
                "ordering": ["job_id"],
                "permissions": [
                    ("operate_job", "Can pause, resume, reset, rewind, run and dry-run jobs"),
                    ("reload_config", "Can apply a reload of pollers.yaml"),
                ],
                "verbose_name": "poll job",
            },
        ),
        migrations.AlterModelOptions(
            name="delivery",
            options={
                "ordering": ["created_at"],
                "permissions": [("redeliver", "Can redeliver dead or held deliveries")],
                "verbose_name_plural": "deliveries",
            },
        ),
        migrations.RunPython(copy_grants, migrations.RunPython.noop),
    ]
