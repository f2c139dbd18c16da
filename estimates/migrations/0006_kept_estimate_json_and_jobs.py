# The kept estimate's report was a pickle, and a database restored from a backup could carry a
# crafted one that the estimate page would unpickle (and so run). It becomes JSON. The old rows
# are dropped, not converted: converting means unpickling them here, which would run a crafted
# pickle during `migrate` just the same; and a kept estimate is only a copy of what the worker
# computes again from the study's data on the next request (nothing is lost). Beside it, the
# estimate jobs the worker (estimates_worker) runs, outside every web request.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("estimates", "0005_no_redundant_indexes"),
        ("studies", "0009_no_redundant_indexes"),
    ]

    operations = [
        migrations.DeleteModel(name="KeptEstimate"),
        migrations.CreateModel(
            name="KeptEstimate",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "study",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="studies.study",
                    ),
                ),
                ("detector", models.CharField(help_text="Registry key of the detector estimated from.", max_length=100)),
                (
                    "options",
                    models.CharField(
                        help_text="The computation's options: bootstrap replicates, seed and whether the round-by-round history is in it (``estimates.selectors.estimate_options``).",
                        max_length=100,
                    ),
                ),
                (
                    "state",
                    models.TextField(
                        help_text="What the estimate was computed from: the study's own data version, its rounds and the options."
                    ),
                ),
                ("history", models.BooleanField(help_text="Whether the report holds the round-by-round history.")),
                ("computed_at", models.DateTimeField(help_text="When the computation finished.")),
                ("seconds", models.FloatField(blank=True, help_text="How long the computation took.", null=True)),
                (
                    "report",
                    models.JSONField(
                        help_text="The report as JSON: the API's body, the page's table, chart, warnings and pending rounds."
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("study", "detector", "options"), name="kept_estimate_one_per_options"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="EstimateJob",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "study",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="studies.study",
                    ),
                ),
                ("detector", models.CharField(help_text="Registry key of the detector estimated from.", max_length=100)),
                ("options", models.CharField(help_text="Bootstrap replicates, seed and history, as text.", max_length=100)),
                ("n_boot", models.PositiveIntegerField(help_text="Design-bootstrap replicates.")),
                ("seed", models.BigIntegerField(help_text="Seed of the bootstrap.")),
                (
                    "history",
                    models.BooleanField(
                        help_text="Whether the round-by-round history (the page's chart) is computed."
                    ),
                ),
                ("state", models.TextField(help_text="The study's data version, its rounds and the options, as text.")),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("queued", "Queued: waits for the estimate worker"),
                            ("running", "Running: the worker computes it"),
                            ("done", "Done: the result is the kept estimate"),
                            ("failed", "Failed: the error says why"),
                        ],
                        default="queued",
                        max_length=10,
                    ),
                ),
                ("attempts", models.PositiveSmallIntegerField(default=0, help_text="Times a worker started it.")),
                ("error", models.TextField(blank=True, help_text="Why it failed (empty unless failed).")),
                ("created_at", models.DateTimeField(auto_now_add=True, help_text="When it was first asked for.")),
                ("started_at", models.DateTimeField(blank=True, help_text="When a worker last started it.", null=True)),
                (
                    "heartbeat_at",
                    models.DateTimeField(
                        blank=True, help_text="When its worker last said it is still computing.", null=True
                    ),
                ),
                ("finished_at", models.DateTimeField(blank=True, help_text="When it finished or failed.", null=True)),
                (
                    "spawned_at",
                    models.DateTimeField(
                        blank=True, help_text="When a web process last started a worker for it.", null=True
                    ),
                ),
            ],
            options={
                "ordering": ["created_at", "id"],
                "indexes": [models.Index(fields=["status", "created_at"], name="estimate_job_status_idx")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("study", "detector", "state"), name="estimate_job_one_per_state"
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("status", "running")),
                        fields=("study",),
                        name="estimate_job_one_running_per_study",
                    ),
                ],
            },
        ),
    ]
