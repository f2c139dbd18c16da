"""HTML screens of the human side: labeling (annotators), disputes, items, agreement (researchers).

Researcher pages exist with and without a study slug: without one they take ``?study=<slug>``,
open the only study, or let the researcher pick one. Item and dispute pages are keyed by item id
(the study follows); a dispute page may name the question (default: the item's first disputed
one). The URL names keep the word "image" of the one-image era (``annotate:image`` is the item
page), so links and bookmarks keep working.
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
    path("<slug:slug>/label/<int:item_id>/", views.label_submit, name="label_submit"),
    path("<slug:slug>/label/undo/", views.label_undo, name="label_undo"),
    # Researchers
    path("disputes/", views.disputes, name="disputes"),
    path("<slug:slug>/disputes/", views.disputes, name="disputes"),
    path("disputes/<int:item_id>/", views.dispute, name="dispute"),
    path("disputes/<int:item_id>/<slug:question>/", views.dispute, name="dispute_question"),
    path("images/", views.images, name="images"),
    path("<slug:slug>/images/", views.images, name="images"),
    path("images/<int:item_id>/", views.image, name="image"),
    path("items/", views.images, name="items"),
    path("<slug:slug>/items/", views.images, name="items"),
    path("items/<int:item_id>/", views.image, name="item"),
    path("agreement/", views.agreement, name="agreement"),
    path("<slug:slug>/agreement/", views.agreement, name="agreement"),
    path("annotators/", views.annotator_stats, name="annotator_stats"),
    path("<slug:slug>/annotators/", views.annotator_stats, name="annotator_stats"),
    path("<slug:slug>/annotators/add/", views.annotators_add, name="annotators_add"),
]
