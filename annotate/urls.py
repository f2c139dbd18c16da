"""URLs of the human side; researcher pages with and without a study slug."""

from __future__ import annotations

from django.urls import path

from annotate.views import labeling, review, team

app_name = "annotate"

urlpatterns = [
    path("no-role/", team.no_role, name="no_role"),
    # Annotators
    path("label/", labeling.label, name="label"),
    path("<slug:slug>/label/", labeling.label_study, name="label_study"),
    path("<slug:slug>/label/<int:item_id>/", labeling.label_submit, name="label_submit"),
    path("<slug:slug>/label/undo/", labeling.label_undo, name="label_undo"),
    # Researchers
    path("disputes/", review.disputes, name="disputes"),
    path("<slug:slug>/disputes/", review.disputes, name="disputes"),
    path("disputes/<int:item_id>/", review.dispute, name="dispute"),
    path("disputes/<int:item_id>/<slug:question>/", review.dispute, name="dispute_question"),
    path("images/", review.images, name="images"),
    path("<slug:slug>/images/", review.images, name="images"),
    path("images/<int:item_id>/", review.image, name="image"),
    path("items/", review.images, name="items"),
    path("<slug:slug>/items/", review.images, name="items"),
    path("items/<int:item_id>/", review.image, name="item"),
    path("agreement/", review.agreement, name="agreement"),
    path("<slug:slug>/agreement/", review.agreement, name="agreement"),
    path("annotators/", team.annotator_stats, name="annotator_stats"),
    path("<slug:slug>/annotators/", team.annotator_stats, name="annotator_stats"),
    path("<slug:slug>/annotators/add/", team.annotators_add, name="annotators_add"),
]
