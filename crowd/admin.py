"""Join links and their participants in the admin: read and close, never add (a link is made by
``create_join_link`` or the study's Join links page, which show its URL once)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import Count, Max, OuterRef, QuerySet, Subquery
from django.http import HttpRequest

from annotate.models import Assignment
from crowd import services
from crowd.models import GuidelineExample, JoinLink, Participant


@admin.register(JoinLink)
class JoinLinkAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "study",
        "quota",
        "n_participants",
        "max_participants",
        "expires_at",
        "closed_at",
        "created_at",
    )
    list_filter = ("study",)
    fields = (
        "study",
        "quota",
        "completion_url",
        "completion_code",
        "panel_params",
        "max_participants",
        "expires_at",
        "closed_at",
        "created_by",
        "created_at",
        "token_digest",
    )
    # What the link promised participants stays as made (the service checked it); the cap and
    # the expiry may change.
    readonly_fields = tuple(name for name in fields if name not in ("max_participants", "expires_at"))
    actions = ("close",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[JoinLink]:
        return super().get_queryset(request).select_related("study").annotate(n=Count("participants"))

    @admin.display(description="participants", ordering="n")
    def n_participants(self, link: Any) -> int:
        return int(link.n)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Close the selected links (they take no one from now on)")
    def close(self, request: HttpRequest, queryset: QuerySet[JoinLink]) -> None:
        for link in queryset:
            services.join_link_close(link=link)
        messages.success(request, f"Closed {queryset.count()} link(s).")


@admin.register(Participant)
class ParticipantAdmin(admin.ModelAdmin):
    list_display = ("panel_id", "study", "link", "user", "started_at", "finished_at", "items", "seconds")
    list_filter = ("study", "link")
    search_fields = ("panel_id", "user__username")
    readonly_fields = ("link", "study", "user", "panel_id", "started_at", "consented_at", "finished_at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Participant]:
        done = Assignment.objects.filter(
            annotator=OuterRef("user"), item__study=OuterRef("study"), completed_at__isnull=False
        ).values("annotator")
        return (
            super()
            .get_queryset(request)
            .select_related("study", "user")
            .annotate(
                n_items=Subquery(done.annotate(n=Count("pk")).values("n")[:1]),
                last_label=Subquery(done.annotate(at=Max("completed_at")).values("at")[:1]),
            )
        )

    @admin.display(description="items", ordering="n_items")
    def items(self, participant: Any) -> int:
        return int(participant.n_items or 0)

    @admin.display(description="seconds")
    def seconds(self, participant: Any) -> str:
        end = participant.finished_at or participant.last_label
        return "" if end is None else f"{(end - participant.started_at).total_seconds():.0f}"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(GuidelineExample)
class GuidelineExampleAdmin(admin.ModelAdmin):
    list_display = ("question", "value", "item")
    raw_id_fields = ("item",)
