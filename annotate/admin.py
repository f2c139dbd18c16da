"""Admin for studies, prompts, images, labels and final labels; zip upload and ground-truth export.

Labels, final labels and their revisions are read-only here: they change only through
``annotate.services`` (which keep the history); the one admin write on them is the image
action "Set final label", which goes through ``services.final_label_set``. Images come in
through the zip upload (or ``import_images``), never through an add form.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from annotate import roles, selectors, services
from annotate.errors import AnnotateError
from annotate.exchange import EXPORT_FORMATS, ground_truth_export
from annotate.ingest import ImportSummary, images_import_zip, study_get_or_create
from annotate.models import (
    Assignment,
    FinalLabel,
    FinalLabelRevision,
    FinalLabelSource,
    Image,
    ImageState,
    Label,
    LabelRevision,
    Prompt,
    Study,
)

EXPORT_CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "json": "application/json"}


def ground_truth_download(study: Study, fmt: str) -> HttpResponse:
    """The study's ground truth as a file download (CSV or JSON)."""
    response = HttpResponse(ground_truth_export(study=study, fmt=fmt), content_type=EXPORT_CONTENT_TYPES[fmt])
    response["Content-Disposition"] = f'attachment; filename="{study.slug}-ground-truth.{fmt}"'
    return response


class ReadOnlyAdmin(admin.ModelAdmin):
    """History and derived rows: visible to admins, changed only by the services."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# --- Study: zip upload and export --------------------------------------------------------------


class ZipUploadForm(forms.Form):
    study = forms.ModelChoiceField(
        queryset=Study.objects.order_by("name"), required=False, help_text="Study to import into."
    )
    new_study = forms.SlugField(
        required=False,
        label="or a new study",
        help_text="Slug of a study to create with the default label set (leave empty to use the study above).",
    )
    archive = forms.FileField(
        label="Zip file",
        help_text=(
            "A zip with manifest.csv at its root (columns image, t2i_model, prompt, category, word, "
            "optional seed, index, params) and the images it lists, by paths relative to the zip root."
        ),
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if bool(data.get("study")) == bool(data.get("new_study")):
            raise forms.ValidationError("Choose an existing study or give the slug of a new one (not both).")
        if data.get("new_study") and Study.objects.filter(slug=data["new_study"]).exists():
            self.add_error("new_study", "A study with this slug exists: choose it above.")
        return data


@admin.register(Study)
class StudyAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "labels_per_image", "show_prompt", "image_count", "export_links")
    search_fields = ("name", "slug")
    prepopulated_fields = {"slug": ("name",)}
    filter_horizontal = ("annotators",)
    actions = ("export_csv", "export_json")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Study]:
        return super().get_queryset(request).annotate(_image_count=Count("images"))

    @admin.display(description="images", ordering="_image_count")
    def image_count(self, study: Study) -> int:
        return study._image_count

    @admin.display(description="ground truth")
    def export_links(self, study: Study) -> str:
        return format_html(
            '<a href="{}">CSV</a> · <a href="{}">JSON</a>',
            reverse("admin:annotate_study_export", args=[study.pk, "csv"]),
            reverse("admin:annotate_study_export", args=[study.pk, "json"]),
        )

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "import-zip/",
                self.admin_site.admin_view(self.import_zip_view),
                name="annotate_study_import_zip",
            ),
            path(
                "<int:pk>/export/<str:fmt>/",
                self.admin_site.admin_view(self.export_view),
                name="annotate_study_export",
            ),
        ]
        return own + super().get_urls()

    def _require_admin(self, request: HttpRequest) -> None:
        # admin_view already demands an active staff user; imports and exports are for admins
        # who may change studies, whatever extra staff accounts exist.
        if not (roles.is_admin(request.user) and self.has_change_permission(request)):
            raise PermissionDenied("Only admins may import images or export ground truth.")

    def export_view(self, request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
        self._require_admin(request)
        study = get_object_or_404(Study, pk=pk)
        if fmt not in EXPORT_FORMATS:
            raise PermissionDenied(f"Unknown export format {fmt!r}.")
        return ground_truth_download(study, fmt)

    def import_zip_view(self, request: HttpRequest) -> HttpResponse:
        self._require_admin(request)
        summary: ImportSummary | None = None
        study: Study | None = None
        if request.method == "POST":
            form = ZipUploadForm(request.POST, request.FILES)
            if form.is_valid():
                study, created = form.cleaned_data["study"], False
                try:
                    if study is None:
                        study, created = study_get_or_create(slug=form.cleaned_data["new_study"])
                    summary = images_import_zip(
                        study=study, zip_file=form.cleaned_data["archive"], user=request.user
                    )
                except AnnotateError as exc:
                    if created:
                        study.delete()  # the zip was refused whole: leave no empty study behind
                    study = None
                    form.add_error("archive", str(exc))
                else:
                    self._summary_message(request, study, summary)
        else:
            form = ZipUploadForm(initial={"study": request.GET.get("study")})
        context = {
            **self.admin_site.each_context(request),
            "title": "Import images from a zip",
            "opts": self.model._meta,
            "form": form,
            "summary": summary,
            "study": study,
        }
        return render(request, "admin/annotate/study/import_zip.html", context)

    def _summary_message(self, request: HttpRequest, study: Study, summary: ImportSummary) -> None:
        text = (
            f"{study.name}: {summary.accepted} images accepted, {summary.duplicates} duplicates "
            f"(already imported), {len(summary.rejected)} rejected."
        )
        level = messages.WARNING if summary.rejected else messages.SUCCESS
        self.message_user(request, text, level)

    def _single_study(self, request: HttpRequest, queryset: QuerySet[Study]) -> Study | None:
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one study to export.", messages.ERROR)
            return None
        return queryset.get()

    @admin.action(description="Export ground truth as CSV")
    def export_csv(self, request: HttpRequest, queryset: QuerySet[Study]) -> HttpResponse | None:
        study = self._single_study(request, queryset)
        return ground_truth_download(study, "csv") if study else None

    @admin.action(description="Export ground truth as JSON")
    def export_json(self, request: HttpRequest, queryset: QuerySet[Study]) -> HttpResponse | None:
        study = self._single_study(request, queryset)
        return ground_truth_download(study, "json") if study else None


@admin.register(Prompt)
class PromptAdmin(admin.ModelAdmin):
    list_display = ("text", "category", "word", "study")
    list_filter = ("study", "category")
    search_fields = ("text", "word")


# --- Image: state, thumbnails, filters -----------------------------------------------------------


class StateFilter(admin.SimpleListFilter):
    """Filter by the derived image state; the rules are the selectors', per study (N differs)."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(ImageState.choices)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Image]) -> QuerySet[Image]:
        value = self.value()
        if value not in ImageState.values:
            return queryset
        match = Q(pk__in=[])
        for study in Study.objects.filter(pk__in=queryset.values("study_id")):
            match |= Q(pk__in=selectors.images_with_state(study=study).filter(state=value).values("pk"))
        return queryset.filter(match)


class LabelInline(ReadOnlyInline):
    model = Label
    fields = ("annotator", "value", "reason", "duration_ms", "created_at", "updated_at")
    readonly_fields = fields


class FinalLabelRevisionInline(ReadOnlyInline):
    model = FinalLabelRevision
    verbose_name_plural = "final label history"
    fields = ("decided_at", "value", "source", "decided_by", "note")
    readonly_fields = fields


@admin.register(Image)
class ImageAdmin(admin.ModelAdmin):
    list_display = ("thumbnail", "source_path", "study", "t2i_model", "category", "state", "final")
    list_filter = ("study", StateFilter, "t2i_model", "prompt__category")
    search_fields = ("source_path", "prompt__text", "prompt__word", "sha256")
    list_select_related = ("study", "prompt", "final_label")
    list_per_page = 50
    readonly_fields = (
        "preview",
        "study",
        "prompt",
        "t2i_model",
        "source_path",
        "sha256",
        "file",
        "width",
        "height",
        "format",
        "seed",
        "index",
        "params",
        "created_at",
        "state",
    )
    fields = readonly_fields
    inlines = (LabelInline, FinalLabelRevisionInline)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # images come in through the zip upload or import_images

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # stored under their content hash; what they are never changes

    @admin.display(description="image")
    def thumbnail(self, image: Image) -> str:
        return format_html(
            '<img src="{}" alt="" loading="lazy" style="max-height:64px;max-width:96px">', image.url
        )

    @admin.display(description="preview")
    def preview(self, image: Image) -> str:
        return format_html('<img src="{}" alt="" style="max-height:320px;max-width:480px">', image.url)

    @admin.display(description="category", ordering="prompt__category")
    def category(self, image: Image) -> str:
        return image.prompt.category

    @admin.display(description="state")
    def state(self, image: Image) -> str:
        return ImageState(selectors.image_state(image)).label

    @admin.display(description="final label")
    def final(self, image: Image) -> str:
        final = getattr(image, "final_label", None)
        return f"{final.value} ({final.get_source_display().lower()})" if final else "—"

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        values: list[str] = []
        for label_set in Study.objects.values_list("label_set", flat=True):
            values += [item["value"] for item in label_set if item["value"] not in values]
        for value in values:
            name = f"set_final_{value}"
            actions[name] = (_final_label_action(value), name, f"Set final label: {value}")
        return actions


def _final_label_action(value: str) -> Any:
    def action(modeladmin: ImageAdmin, request: HttpRequest, queryset: QuerySet[Image]) -> None:
        if not roles.is_admin(request.user):
            raise PermissionDenied
        done, failed = 0, []
        for image in queryset.select_related("study"):
            try:
                services.final_label_set(
                    image=image,
                    value=value,
                    decided_by=request.user,
                    note="Set in the admin.",
                    source=FinalLabelSource.RESOLVED,
                )
                done += 1
            except AnnotateError as exc:
                failed.append(f"{image.source_path}: {exc}")
        modeladmin.message_user(request, f"Final label “{value}” set on {done} image(s).", messages.SUCCESS)
        for line in failed:
            modeladmin.message_user(request, line, messages.ERROR)

    return action


# --- Labels, final labels and their history (read-only) ----------------------------------------


class LabelRevisionInline(ReadOnlyInline):
    model = LabelRevision
    fields = ("changed_at", "value", "reason", "changed_by")
    readonly_fields = fields


@admin.register(Label)
class LabelAdmin(ReadOnlyAdmin):
    list_display = ("image", "annotator", "value", "reason", "duration_ms", "updated_at")
    list_filter = ("image__study", "value", "annotator")
    search_fields = ("image__source_path", "annotator__username", "reason")
    list_select_related = ("image", "annotator")
    inlines = (LabelRevisionInline,)


@admin.register(LabelRevision)
class LabelRevisionAdmin(ReadOnlyAdmin):
    list_display = ("label", "value", "reason", "changed_by", "changed_at")
    list_filter = ("label__image__study", "value")
    search_fields = ("label__image__source_path", "changed_by__username")
    list_select_related = ("label", "changed_by")


@admin.register(FinalLabel)
class FinalLabelAdmin(ReadOnlyAdmin):
    list_display = ("image", "value", "source", "decided_by", "decided_at", "note")
    list_filter = ("image__study", "source", "value")
    search_fields = ("image__source_path", "note", "decided_by__username")
    list_select_related = ("image", "decided_by")


@admin.register(FinalLabelRevision)
class FinalLabelRevisionAdmin(ReadOnlyAdmin):
    list_display = ("image", "value", "source", "decided_by", "decided_at", "note")
    list_filter = ("image__study", "source")
    search_fields = ("image__source_path", "note")
    list_select_related = ("image", "decided_by")


@admin.register(Assignment)
class AssignmentAdmin(ReadOnlyAdmin):
    list_display = ("image", "annotator", "slot", "claimed_at", "expires_at", "completed_at")
    list_filter = ("image__study", "annotator")
    list_select_related = ("image", "annotator")
