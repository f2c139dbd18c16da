"""HTML screens of the human side: labeling (annotators), disputes, images, agreement (researchers).

Researcher pages exist with and without a study slug: without one they open the only study, or
let the researcher pick one. Image and dispute pages are keyed by image id (the study follows).
"""

from __future__ import annotations

from django.urls import path

from annotate import views

app_name = "annotate"

urlpatterns = [
    path("no-role/", views.no_role, name="no_role"),
    # Annotators
    path("label/", views.label, name="label"),
    path("<slug:slug>/label/", views.label_study, name="label_study"),
    path("<slug:slug>/label/<int:image_id>/", views.label_submit, name="label_submit"),
    path("<slug:slug>/label/undo/", views.label_undo, name="label_undo"),
    # Researchers
    path("disputes/", views.disputes, name="disputes"),
    path("<slug:slug>/disputes/", views.disputes, name="disputes"),
    path("disputes/<int:image_id>/", views.dispute, name="dispute"),
    path("images/", views.images, name="images"),
    path("<slug:slug>/images/", views.images, name="images"),
    path("images/<int:image_id>/", views.image, name="image"),
    path("agreement/", views.agreement, name="agreement"),
    path("<slug:slug>/agreement/", views.agreement, name="agreement"),
    path("annotators/", views.annotator_stats, name="annotator_stats"),
    path("<slug:slug>/annotators/", views.annotator_stats, name="annotator_stats"),
]
