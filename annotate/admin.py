"""Admin of studies and their items, labels and final labels (read-only); zip upload and export."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from annotate import selectors, services
from annotate.exports import EXPORT_FORMATS, ground_truth_download
from annotate.models import (
    Assignment,
    FinalLabel,
    FinalLabelRevision,
    FinalLabelSource,
    ItemState,
    Label,
    LabelRevision,
)
from studies import permissions
from studies.batching import in_chunks
from studies.errors import DomainError
from studies.imports import ImportSummary
from studies.ingest import images_import_zip, study_get_or_create
from studies.kinds import question_kinds
from studies.models import (
    AgreementRule,
    Image,
    ImportRun,
    Item,
    ItemChange,
    ItemImage,
    Prompt,
    Question,
    Study,
)
from studies.protocols import PROTOCOLS, protocol_choices
from studies.selectors import images_load, item_main_image, study_questions
from studies.services import study_create

EXPORT_CONTENT_TYPES = {"csv": "text/csv; charset=utf-8", "json": "application/json"}


def _titled(key: str, name: str) -> str:
    return format_html('<span title="{}">{}</span>', name, key)


class _NoWrites:
    """Rows visible to admins, changed only by the services."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyAdmin(_NoWrites, admin.ModelAdmin):
    """History and derived rows."""


class ReadOnlyInline(_NoWrites, admin.TabularInline):
    """Rows shown with their parent, every field read-only."""

    extra = 0

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.fields


# --- Study: zip upload and export --------------------------------------------------------------


class ZipUploadForm(forms.Form):
    study = forms.ModelChoiceField(
        queryset=Study.objects.order_by("name"), required=False, help_text="Study to import into."
    )
    new_study = forms.SlugField(
        required=False,
        label="or a new study",
        help_text="Slug of a study to create, of the protocol below (leave empty to use the study above).",
    )
    new_study_protocol = forms.ChoiceField(
        required=False,
        label="of protocol",
        choices=lambda: [("", "---------"), *protocol_choices()],
        help_text="The kind of the new study (its preset questions). Studies with other settings: "
        "Add study, or the create_study command.",
    )
    archive = forms.FileField(
        label="Zip file",
        help_text=(
            "A zip with one manifest.csv, at its root or in a folder (columns image, t2i_model, prompt, "
            "category, word — pair studies: item, role, image —, optional item, role, seed, index, params, "
            "questions; other columns become item metadata), and the images it lists, by paths relative "
            "to the manifest's folder."
        ),
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or self.cleaned_data
        if bool(data.get("study")) == bool(data.get("new_study")):
            raise forms.ValidationError("Choose an existing study or give the slug of a new one (not both).")
        if data.get("new_study") and Study.objects.filter(slug=data["new_study"]).exists():
            self.add_error("new_study", "A study with this slug exists: choose it above.")
        if data.get("new_study") and not data.get("new_study_protocol"):
            self.add_error("new_study_protocol", "Choose the protocol of the new study.")
        return data


class QuestionInline(ReadOnlyInline):
    """A study's questions, shown, not edited: they are what its labels mean."""

    model = Question
    fields = (
        "position",
        "key",
        "text",
        "kind_label",
        "hotkey",
        "default_value",
        "unresolvable_value",
        "choices",
    )

    @admin.display(description="kind")
    def kind_label(self, question: Question) -> str:
        kind = question_kinds().get(question.kind)
        return kind.label if kind is not None else question.kind


class StudyForm(forms.ModelForm):
    """The study form; the same rule as ``create_study``: a majority needs 3 labels or more."""

    class Meta:
        model = Study
        fields = (
            "name",
            "slug",
            "protocol",
            "description",
            "labels_per_item",
            "agreement",
            "show_prompt",
            "claim_timeout_seconds",
            "parameters",
            "annotators",
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or self.cleaned_data
        labels = data.get("labels_per_item", getattr(self.instance, "labels_per_item", None))
        rule = data.get("agreement", getattr(self.instance, "agreement", None))
        if rule == AgreementRule.MAJORITY and labels is not None and labels < 3:
            raise forms.ValidationError(
                "A majority needs at least 3 labels per item (with 2, use unanimous)."
            )
        protocol = str(data.get("protocol") or "")
        if self.instance.pk is None and protocol in PROTOCOLS:
            # A protocol with a questions CSV or required settings is created on the command line.
            spec = PROTOCOLS[protocol]
            if not spec.questions or any(option.required for option in spec.options):
                raise forms.ValidationError(
                    f"A {protocol} study is created with its questions CSV and settings: "
                    f"manage.py create_study SLUG --protocol {protocol} --questions F.csv"
                    + "".join(f" --{o.name.replace('_', '-')} …" for o in spec.options if o.required)
                )
        return data


@admin.register(Study)
class StudyAdmin(admin.ModelAdmin):
    # Short columns (keys, not long names): the list fits beside the menu on a 1280 px screen.
    list_display = (
        "name",
        "slug",
        "protocol_key",
        "labels_n",
        "agreement_rule",
        "item_count",
        "export_links",
    )
    list_filter = ("protocol",)
    search_fields = ("name", "slug")
    prepopulated_fields = {"slug": ("name",)}
    filter_horizontal = ("annotators",)
    form = StudyForm
    inlines = (QuestionInline,)
    actions = ("export_csv", "export_json")

    def get_readonly_fields(self, request: HttpRequest, obj: Study | None = None) -> tuple[str, ...]:
        # The protocol is chosen once; once people labelled, so are N and the agreement rule.
        if obj is None:
            return ()
        if Item.objects.filter(study=obj, completed_seats__gt=0).exists():
            return ("protocol", "labels_per_item", "agreement")
        return ("protocol",)

    def save_model(self, request: HttpRequest, obj: Study, form: forms.ModelForm, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        # A new study: its protocol's questions and parameters from the service, then the form's fields.
        with transaction.atomic():
            created = study_create(
                slug=obj.slug,
                protocol=obj.protocol,
                name=obj.name,
                labels_per_item=obj.labels_per_item,
                agreement=obj.agreement,
            )
            obj.pk, obj.created_at = created.pk, created.created_at
            if not obj.parameters:
                obj.parameters = created.parameters
            obj.save()

    def get_queryset(self, request: HttpRequest) -> QuerySet[Study]:
        return super().get_queryset(request).annotate(_item_count=Count("items"))

    @admin.display(description="items", ordering="_item_count")
    def item_count(self, study: Study) -> int:
        return study._item_count  # type: ignore[attr-defined]

    @admin.display(description="protocol", ordering="protocol")
    def protocol_key(self, study: Study) -> str:
        return _titled(study.protocol, study.get_protocol_display())

    @admin.display(description="N labels", ordering="labels_per_item")
    def labels_n(self, study: Study) -> int:
        return study.labels_per_item

    @admin.display(description="agreement", ordering="agreement")
    def agreement_rule(self, study: Study) -> str:
        return _titled(study.agreement, study.get_agreement_display())

    @admin.display(description="ground truth")
    def export_links(self, study: Study) -> str:
        # No-break spaces: the two links stay on one line, never clipped apart.
        return format_html(
            '<a href="{}">CSV</a>&nbsp;·&nbsp;<a href="{}">JSON</a>',
            reverse("admin:annotate_study_export", args=[study.pk, "csv"]),
            reverse("admin:annotate_study_export", args=[study.pk, "json"]),
        )

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("import-zip/", view(self.import_zip_view), name="annotate_study_import_zip"),
            path("<int:pk>/export/<str:fmt>/", view(self.export_view), name="annotate_study_export"),
            *super().get_urls(),
        ]

    def _require_admin(self, request: HttpRequest) -> None:
        # Imports and exports are for admins who may change studies, not any staff account.
        if not (permissions.is_admin(request.user) and self.has_change_permission(request)):
            raise PermissionDenied("Only admins may import images or export ground truth.")

    def export_view(self, request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
        self._require_admin(request)
        study = get_object_or_404(Study, pk=pk)
        if fmt not in EXPORT_FORMATS:
            raise PermissionDenied(f"Unknown export format {fmt!r}.")
        return ground_truth_download(study, fmt, EXPORT_CONTENT_TYPES[fmt])

    def import_zip_view(self, request: HttpRequest) -> HttpResponse:
        self._require_admin(request)
        summary: ImportSummary | None = None
        study: Study | None = None
        if request.method == "POST":
            form = ZipUploadForm(request.POST, request.FILES)
        else:
            form = ZipUploadForm(initial={"study": request.GET.get("study")})
        if form.is_bound and form.is_valid():
            study, created = form.cleaned_data["study"], False
            try:
                if study is None:
                    study, created = study_get_or_create(
                        slug=form.cleaned_data["new_study"], protocol=form.cleaned_data["new_study_protocol"]
                    )
                summary = images_import_zip(
                    study=study, zip_file=form.cleaned_data["archive"], user=request.user
                )
            except DomainError as exc:
                form.add_error("archive", str(exc))
            if created and study is not None and not study.items.exists():
                # The zip, or every row of it, was refused: leave no empty study behind.
                if summary is not None:
                    text = f"Nothing was imported: the new study “{study.slug}” was not created."
                    self.message_user(request, text, messages.ERROR)
                study.delete()
                study = None
            elif summary is not None and study is not None:
                text = (
                    f"{study.name}: {summary.accepted} images accepted, {summary.duplicates} duplicates "
                    f"(already imported), {len(summary.rejected)} rejected."
                )
                if summary.rejected:
                    text += " Rejected rows are listed below; their items were not imported."
                self.message_user(request, text, messages.WARNING if summary.rejected else messages.SUCCESS)
        context = {
            **self.admin_site.each_context(request),
            "title": "Import images from a zip",
            "opts": self.model._meta,
            "form": form,
            "summary": summary,
            "study": study,
        }
        return render(request, "admin/studies/study/import_zip.html", context)

    def _export(self, request: HttpRequest, queryset: QuerySet[Study], fmt: str) -> HttpResponse | None:
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one study to export.", messages.ERROR)
            return None
        return ground_truth_download(queryset.get(), fmt, EXPORT_CONTENT_TYPES[fmt])

    @admin.action(description="Export ground truth as CSV")
    def export_csv(self, request: HttpRequest, queryset: QuerySet[Study]) -> HttpResponse | None:
        return self._export(request, queryset, "csv")

    @admin.action(description="Export ground truth as JSON")
    def export_json(self, request: HttpRequest, queryset: QuerySet[Study]) -> HttpResponse | None:
        return self._export(request, queryset, "json")


@admin.register(Prompt)
class PromptAdmin(admin.ModelAdmin):
    list_display = ("text", "category", "word", "study")
    list_filter = ("study", "category")
    search_fields = ("text", "word")


# --- Item: state, thumbnails, filters -----------------------------------------------------------


class StateFilter(admin.SimpleListFilter):
    """Filter by the derived item state; the rules are the selectors'."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(ItemState.choices)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Item]) -> QuerySet[Item]:
        value = self.value()
        if value not in ItemState.values:
            return queryset
        # The states of the listed studies' items only (a study's N is read in the same query).
        states = selectors.items_with_state(study=None).filter(study__in=queryset.values("study_id"))
        return queryset.filter(pk__in=states.filter(state=value).values("pk"))


class LabelInline(ReadOnlyInline):
    model = Label
    fields = ("question", "annotator", "value", "reason", "duration_ms", "created_at", "updated_at")


class FinalLabelRevisionInline(ReadOnlyInline):
    model = FinalLabelRevision
    verbose_name_plural = "final label history"
    fields = ("decided_at", "question", "value", "source", "decided_by", "note")


class ItemImageInline(ReadOnlyInline):
    model = ItemImage
    fields = ("role", "source_path", "image")


def _thumbnail(item: Item, height: int) -> str:
    link = item_main_image(item)
    if link is None:
        return "—"
    return format_html(
        '<img src="{}" alt="" loading="lazy" style="max-height:{}px;max-width:{}px">',
        link.image.url,
        height,
        height * 3 // 2,
    )


@admin.register(Item)
class ItemAdmin(admin.ModelAdmin):
    list_display = ("thumbnail", "key", "study", "t2i_model", "category", "state")
    list_filter = ("study", StateFilter, "t2i_model", "prompt__category")
    search_fields = ("key", "prompt__text", "prompt__word", "item_images__image__sha256")
    list_select_related = ("study", "prompt")
    list_per_page = 50
    readonly_fields = (
        "preview",
        "study",
        "key",
        "prompt",
        "t2i_model",
        "seed",
        "index",
        "params",
        "metadata",
        "question_keys",
        "created_at",
        "state",
    )
    fields = readonly_fields
    inlines = (ItemImageInline, LabelInline, FinalLabelRevisionInline)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> Any:
        changelist = super().get_changelist(request, **kwargs)

        class WithStates(changelist):  # type: ignore[misc, valid-type]
            """Load the page's states in one query instead of one per row."""

            def get_results(self, request: HttpRequest) -> None:
                super().get_results(request)
                page = list(self.result_list)
                # Thumbnails here, not in get_queryset, which an action on "select all" reads whole.
                images_load(page)
                states = dict(
                    selectors.items_with_state(study=None)
                    .filter(pk__in=[item.pk for item in page])
                    .values_list("pk", "state")
                )
                for item in page:
                    item._item_state = states.get(item.pk, ItemState.UNLABELLED)

        return WithStates

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # items come in through the zip upload or import_images

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # what was generated or imported never changes

    @admin.display(description="image")
    def thumbnail(self, item: Item) -> str:
        return _thumbnail(item, 64)

    @admin.display(description="preview")
    def preview(self, item: Item) -> str:
        return _thumbnail(item, 320)

    @admin.display(description="category", ordering="prompt__category")
    def category(self, item: Item) -> str:
        return item.prompt.category if item.prompt else ""

    @admin.display(description="state")
    def state(self, item: Item) -> str:
        value = getattr(item, "_item_state", None) or selectors.item_state(item)
        return ItemState(value).label

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        # One action per single-question study answer (the gender question's four values).
        seen: set[str] = set()
        for question in Question.objects.filter(kind="choice").select_related("study"):
            if question.study.questions.count() != 1:
                continue
            for value in question.values:
                if value in seen:
                    continue
                seen.add(value)
                name = f"set_final_{value}"
                actions[name] = (_final_label_action(value), name, f"Set final label: {value}")
        return actions


def _items_in_chunks(queryset: QuerySet[Item]) -> Iterator[Item]:
    """The items of an action's selection, in order, with their studies, a chunk of ids at a time."""
    ids = list(queryset.prefetch_related(None).values_list("pk", flat=True))
    for chunk in in_chunks(ids):
        read = Item.objects.select_related("study").in_bulk(chunk)
        yield from (read[pk] for pk in chunk if pk in read)


def _final_label_action(value: str) -> Any:
    def action(modeladmin: ItemAdmin, request: HttpRequest, queryset: QuerySet[Item]) -> None:
        if not permissions.is_admin(request.user):
            raise PermissionDenied
        done, failed = 0, []
        for item in _items_in_chunks(queryset):
            questions = study_questions(item.study)
            try:
                if len(questions) != 1:
                    raise DomainError("its study asks several questions: resolve them on the dispute page")
                services.final_label_set(
                    item=item,
                    question=questions[0],
                    value=value,
                    decided_by=request.user,
                    note="Set in the admin.",
                    source=FinalLabelSource.RESOLVED,
                )
                done += 1
            except DomainError as exc:
                failed.append(f"{item.key}: {exc}")
        modeladmin.message_user(request, f"Final label “{value}” set on {done} item(s).", messages.SUCCESS)
        for line in failed:
            modeladmin.message_user(request, line, messages.ERROR)

    return action


@admin.register(Image)
class ImageFileAdmin(ReadOnlyAdmin):
    """Image files: one row per content hash, shared by the items that use them."""

    list_display = ("file", "width", "height", "format", "created_at")
    search_fields = ("sha256", "file", "item_images__source_path")


@admin.register(ItemChange)
class ItemChangeAdmin(ReadOnlyAdmin):
    """The audit trail of corrections to items, written by the services only."""

    list_display = ("changed_at", "study", "item_key", "action", "actor", "source")
    list_filter = ("study", "action")
    search_fields = ("item_key", "actor", "source")
    list_select_related = ("study",)


@admin.register(ImportRun)
class ImportRunAdmin(ReadOnlyAdmin):
    """Every import run: who, when, which file, its counts and refused rows."""

    list_display = ("started_at", "kind", "study", "actor", "file", "status", "rows", "rejected")
    list_filter = ("kind", "status", "study")
    search_fields = ("file", "actor")
    list_select_related = ("study",)
    readonly_fields = [f.name for f in ImportRun._meta.fields]


# --- Labels, final labels and their history (read-only) ----------------------------------------


class LabelRevisionInline(ReadOnlyInline):
    model = LabelRevision
    fields = ("changed_at", "value", "reason", "changed_by")


@admin.register(Label)
class LabelAdmin(ReadOnlyAdmin):
    list_display = ("item", "question", "annotator", "value", "reason", "duration_ms", "updated_at")
    list_filter = ("item__study", "question__key", "value", "annotator")
    search_fields = ("item__key", "annotator__username", "reason")
    list_select_related = ("item", "question", "annotator")
    inlines = (LabelRevisionInline,)


@admin.register(LabelRevision)
class LabelRevisionAdmin(ReadOnlyAdmin):
    list_display = ("label", "value", "reason", "changed_by", "changed_at")
    list_filter = ("label__item__study", "value")
    search_fields = ("label__item__key", "changed_by__username")
    list_select_related = ("label", "changed_by")


@admin.register(FinalLabel)
class FinalLabelAdmin(ReadOnlyAdmin):
    list_display = ("item", "question", "value", "source", "decided_by", "decided_at", "note")
    list_filter = ("item__study", "source", "value")
    search_fields = ("item__key", "note", "decided_by__username")
    list_select_related = ("item", "question", "decided_by")


@admin.register(FinalLabelRevision)
class FinalLabelRevisionAdmin(ReadOnlyAdmin):
    list_display = ("item", "question", "value", "source", "decided_by", "decided_at", "note")
    list_filter = ("item__study", "source")
    search_fields = ("item__key", "note")
    list_select_related = ("item", "question", "decided_by")


@admin.register(Assignment)
class AssignmentAdmin(ReadOnlyAdmin):
    list_display = ("item", "annotator", "slot", "claimed_at", "expires_at", "completed_at")
    list_filter = ("item__study", "annotator")
    list_select_related = ("item", "annotator")
