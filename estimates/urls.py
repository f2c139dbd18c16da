"""The estimate page (/reports/estimate/?study=<slug>&detector=<key>) and its job's progress."""

from __future__ import annotations

from django.urls import path

from estimates import views

app_name = "estimates"

urlpatterns = [
    path("", views.estimate_page, name="page"),
    path("job/<int:job_id>/", views.estimate_job_progress, name="job"),
]
