"""The estimate page, beside the reports (/reports/estimate/?study=<slug>&detector=<key>)."""

from __future__ import annotations

from django.urls import path

from estimates import views

app_name = "estimates"

urlpatterns = [path("", views.estimate_page, name="page")]
