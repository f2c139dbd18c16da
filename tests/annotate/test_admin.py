"""Admin: model pages, zip upload (admins only, zip-slip refused, bad values never a 500), study
forms with the protocol's questions, ground-truth downloads."""

from __future__ import annotations

import csv
import io
import json
import stat
import zipfile

import pytest
from django.urls import reverse

from annotate.models import FinalLabel, FinalLabelSource
from studies.ingest import ZipRejected, images_import_zip
from studies.models import Image, Item, ItemImage, Question, Study
from tests.annotate.gender import final_of, label_import
from tests.factories import ItemFactory, PromptFactory, StudyFactory, image_of, png_bytes
from tests.sqlite_limits import LIMIT, sqlite_variable_limit

MANIFEST_HEADER = "image,t2i_model,prompt,category,word,seed\n"


def make_zip(
    files: dict[str, bytes], manifest_rows: list[str] | None = None, symlinks: dict[str, str] | None = None
) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        if manifest_rows is not None:
            archive.writestr("manifest.csv", MANIFEST_HEADER + "".join(f"{r}\n" for r in manifest_rows))
        for name, data in files.items():
            archive.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, target)
    return buffer.getvalue()


def good_zip(n: int = 3) -> bytes:
    files = {f"sdxl/{i}.png": png_bytes(200 + i) for i in range(n)}
    rows = [f"sdxl/{i}.png,sdxl,a photo of a nurse,profession,nurse,{i}" for i in range(n)]
    return make_zip(files, rows)


def upload(client, study: Study, data: bytes, name: str = "batch.zip"):
    archive = io.BytesIO(data)
    archive.name = name
    return client.post(reverse("admin:annotate_study_import_zip"), {"study": study.pk, "archive": archive})


@pytest.fixture
def admin_client(client_for, admin_user):
    return client_for(admin_user)


# --- pages ------------------------------------------------------------------------------------------


def item_paths() -> list[str]:
    return list(ItemImage.objects.order_by("id").values_list("source_path", flat=True))


@pytest.mark.parametrize(
    "page",
    [
        "studies_study",
        "studies_prompt",
        "studies_item",
        "studies_image",
        "annotate_label",
        "annotate_labelrevision",
        "annotate_finallabel",
        "annotate_finallabelrevision",
        "annotate_assignment",
    ],
)
def test_admin_sees_every_list(admin_client, study, page, annotator_a):
    item = ItemFactory(prompt=PromptFactory(study=study))
    label_import(item=item, annotator=annotator_a, value="male")
    response = admin_client.get(reverse(f"admin:{page}_changelist"))
    assert response.status_code == 200


def test_item_list_shows_thumbnail_state_and_filters_by_state(admin_client, study, annotator_a, annotator_b):
    prompt = PromptFactory(study=study)
    agreed, untouched = ItemFactory(prompt=prompt), ItemFactory(prompt=prompt)
    for user in (annotator_a, annotator_b):
        label_import(item=agreed, annotator=user, value="female")
    url = reverse("admin:studies_item_changelist")
    page = admin_client.get(url).content.decode()
    assert f'src="/media/{image_of(agreed).file}"' in page
    assert "Agreed" in page
    filtered = admin_client.get(url, {"state": "agreed"}).content.decode()
    assert agreed.key in filtered
    assert untouched.key not in filtered


def test_item_page_shows_images_labels_and_final_label_history(admin_client, study, annotator_a, annotator_b):
    item = ItemFactory(prompt=PromptFactory(study=study))
    for user in (annotator_a, annotator_b):
        label_import(item=item, annotator=user, value="female")
    page = admin_client.get(reverse("admin:studies_item_change", args=[item.pk])).content.decode()
    assert "anna" in page
    assert "final label history" in page.lower()
    assert item.key in page


def test_a_pair_item_page_shows_both_images(admin_client, db):
    from tests.factories import PairItemFactory

    pair = PairItemFactory(prompt=PromptFactory(study=StudyFactory(protocol="pair_change")))
    page = admin_client.get(reverse("admin:studies_item_change", args=[pair.pk])).content.decode()
    assert "Input (seed photo)" in page
    assert f"{pair.key}.png" in page


def test_labels_cannot_be_added_or_changed_in_the_admin(admin_client, study, annotator_a):
    item = ItemFactory(prompt=PromptFactory(study=study))
    label = label_import(item=item, annotator=annotator_a, value="male")
    assert admin_client.get(reverse("admin:annotate_label_add")).status_code == 403
    response = admin_client.post(reverse("admin:annotate_label_change", args=[label.pk]), {"value": "female"})
    assert response.status_code == 403
    label.refresh_from_db()
    assert label.value == "male"


def test_items_cannot_be_added_or_changed_in_the_admin(admin_client, study):
    item = ItemFactory(prompt=PromptFactory(study=study))
    assert admin_client.get(reverse("admin:studies_item_add")).status_code == 403
    response = admin_client.post(reverse("admin:studies_item_change", args=[item.pk]), {"key": "renamed"})
    assert response.status_code == 403
    item.refresh_from_db()
    assert item.key != "renamed"


def test_set_final_label_action_goes_through_the_service(admin_client, study, admin_user):
    item = ItemFactory(prompt=PromptFactory(study=study))
    response = admin_client.post(
        reverse("admin:studies_item_changelist"),
        {"action": "set_final_low_quality", "_selected_action": [item.pk]},
    )
    assert response.status_code == 302
    final = final_of(item)
    assert (final.value, final.source, final.decided_by) == (
        "low_quality",
        FinalLabelSource.RESOLVED,
        admin_user,
    )
    assert item.final_label_revisions.count() == 1


def test_set_final_label_on_every_item_reads_the_selection_in_chunks_under_the_limit(
    admin_client, study, admin_user, settings
):
    """ "Select all" hands the action every item the filters match: 150 here, with SQLite's own
    limit at 120 — the items (and no prefetch of their images) are read a chunk at a time."""
    settings.BIASLAB_SQL_MAX_VARIABLES = LIMIT
    prompt = PromptFactory(study=study)
    first = ItemFactory(prompt=prompt)
    rest = Item.objects.bulk_create(
        [Item(study=study, prompt=prompt, key=f"k/{n:03d}.png") for n in range(149)]
    )
    ItemImage.objects.bulk_create(
        [ItemImage(item=item, image=image_of(first), role="image", source_path=item.key) for item in rest]
    )
    with sqlite_variable_limit(120):
        response = admin_client.post(
            reverse("admin:studies_item_changelist"),
            {"action": "set_final_male", "select_across": "1", "_selected_action": [first.pk]},
            follow=True,
        )
    assert response.status_code == 200
    assert "Final label “male” set on 150 item(s)." in response.content.decode()
    assert (
        FinalLabel.objects.filter(
            value="male", source=FinalLabelSource.RESOLVED, decided_by=admin_user
        ).count()
        == 150
    )


def test_set_final_label_action_refuses_items_of_a_study_of_several_questions(admin_client, study, db):
    gender_item = ItemFactory(prompt=PromptFactory(study=study))
    attributes_item = ItemFactory(prompt=PromptFactory(study=StudyFactory(protocol="attributes")))
    response = admin_client.post(
        reverse("admin:studies_item_changelist"),
        {"action": "set_final_male", "_selected_action": [gender_item.pk, attributes_item.pk]},
        follow=True,
    )
    page = response.content.decode()
    assert "set on 1 item(s)" in page
    assert "its study asks several questions" in page
    assert final_of(attributes_item) is None


# --- study forms ------------------------------------------------------------------------------------


def study_form(**changes: object) -> dict[str, object]:
    data: dict[str, object] = {
        "name": "Clothes",
        "slug": "clothes",
        "protocol": "attributes",
        "description": "Tick what the person wears.",
        "labels_per_item": 3,
        "agreement": "majority",
        "claim_timeout_seconds": 900,
        "parameters": "{}",
        "questions-TOTAL_FORMS": 0,
        "questions-INITIAL_FORMS": 0,
    }
    data.update(changes)
    return data


def test_a_study_added_in_the_admin_gets_its_protocols_questions(admin_client, annotator_a):
    response = admin_client.post(reverse("admin:studies_study_add"), study_form(annotators=[annotator_a.pk]))
    assert response.status_code == 302, response.content.decode()[:2000]
    study = Study.objects.get(slug="clothes")
    assert (study.protocol, study.description, study.labels_per_item) == (
        "attributes",
        "Tick what the person wears.",
        3,
    )
    assert Question.objects.filter(study=study).count() == 15
    assert list(study.annotators.all()) == [annotator_a]


def test_the_admin_study_form_refuses_a_majority_of_two(admin_client):
    response = admin_client.post(reverse("admin:studies_study_add"), study_form(labels_per_item=2))
    assert "A majority needs at least 3 labels per item" in response.content.decode()
    assert not Study.objects.exists()


def test_a_labelled_study_keeps_its_protocol_n_and_agreement_in_the_admin(admin_client, study, annotator_a):
    label_import(item=ItemFactory(prompt=PromptFactory(study=study)), annotator=annotator_a, value="male")
    page = admin_client.get(reverse("admin:studies_study_change", args=[study.pk])).content.decode()
    assert 'name="labels_per_item"' not in page
    assert 'name="agreement"' not in page
    assert "Which gender does the person in the image present?" in page  # the question inline


# --- zip upload ------------------------------------------------------------------------------------


def test_admin_imports_a_zip_and_sees_the_summary(admin_client, study):
    response = upload(admin_client, study, good_zip())
    page = response.content.decode()
    assert response.status_code == 200
    assert "3 images accepted, 0 duplicates (already imported), 0 rejected" in page
    assert Item.objects.filter(study=study).count() == 3


def test_uploading_the_same_zip_twice_changes_nothing(admin_client, study):
    upload(admin_client, study, good_zip())
    before = list(ItemImage.objects.values_list("id", "item_id", "image__sha256"))
    page = upload(admin_client, study, good_zip()).content.decode()
    assert "0 images accepted, 3 duplicates" in page
    assert list(ItemImage.objects.values_list("id", "item_id", "image__sha256")) == before


def test_bad_rows_in_a_zip_are_listed_with_their_reasons(admin_client, study):
    data = make_zip(
        {"ok.png": png_bytes(1), "broken.png": b"not an image"},
        ["ok.png,sdxl,p,c,w,1", "broken.png,sdxl,p,c,w,2", "../outside.png,sdxl,p,c,w,3"],
    )
    page = upload(admin_client, study, data).content.decode()
    assert "1 images accepted" in page
    assert "not an image" in page
    assert "path with &#x27;..&#x27; refused" in page
    assert item_paths() == ["ok.png"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (make_zip({"../evil.png": png_bytes(1)}, ["ok.png,sdxl,p,c,w,1"]), "points outside the archive"),
        (make_zip({"/abs.png": png_bytes(1)}, ["ok.png,sdxl,p,c,w,1"]), "has an absolute path"),
        (make_zip({}, ["link.png,sdxl,p,c,w,1"], symlinks={"link.png": "/etc/passwd"}), "is a symbolic link"),
        (make_zip({"a.png": png_bytes(1)}, None), "no manifest.csv at its root"),
        (b"PK\x03\x04 this is not really a zip", "not a zip file"),
    ],
    ids=["dot-dot", "absolute", "symlink", "no-manifest", "not-a-zip"],
)
def test_an_unsafe_or_broken_zip_is_refused_whole(admin_client, study, data, message, tmp_path):
    response = upload(admin_client, study, data)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert Image.objects.count() == 0
    assert not (tmp_path.parent / "evil.png").exists()


def test_a_zip_over_the_size_limit_is_refused(study, settings):
    settings.BIASLAB_MAX_UPLOAD_BYTES = 500
    with pytest.raises(ZipRejected, match=r"expands to more than 500 bytes|above the limit of 500"):
        images_import_zip(study=study, zip_file=io.BytesIO(good_zip(5)))
    assert Image.objects.count() == 0


def test_a_zip_whose_content_expands_past_the_limit_is_refused(study, settings):
    settings.BIASLAB_MAX_UPLOAD_BYTES = 200_000
    bomb = make_zip({"zeros.bin": b"\0" * 300_000}, ["x.png,sdxl,p,c,w,1"])
    assert len(bomb) < 200_000
    with pytest.raises(ZipRejected, match="expands to more than 200000 bytes"):
        images_import_zip(study=study, zip_file=io.BytesIO(bomb))


@pytest.mark.parametrize("persona", ["researcher", "annotator_a", "outsider"])
def test_only_admins_may_upload_a_zip(request, client_for, study, persona):
    client = client_for(request.getfixturevalue(persona))
    url = reverse("admin:annotate_study_import_zip")
    assert client.get(url).status_code == 302  # to the admin login
    response = upload(client, study, good_zip())
    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]
    assert Image.objects.count() == 0


def test_staff_without_change_permission_on_studies_may_not_upload(client_for, study, django_user_model):
    from tests.factories import UserFactory

    staff = UserFactory(username="stan")
    staff.is_staff = True
    staff.save()
    response = upload(client_for(staff), study, good_zip())
    assert response.status_code == 403
    assert Image.objects.count() == 0


# --- export ----------------------------------------------------------------------------------------


def test_admin_downloads_ground_truth_as_csv_and_json(admin_client, study):
    ItemFactory(prompt=PromptFactory(study=study), key="a.png")
    response = admin_client.get(reverse("admin:annotate_study_export", args=[study.pk, "csv"]))
    assert response["Content-Disposition"] == 'attachment; filename="gender-ground-truth.csv"'
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(r["item"], r["question"], r["image"]) for r in rows] == [("a.png", "gender", "a.png")]
    response = admin_client.get(reverse("admin:annotate_study_export", args=[study.pk, "json"]))
    assert json.loads(response.content)["rows"][0]["image"] == "a.png"


def test_export_action_downloads_the_selected_study(admin_client, study):
    response = admin_client.post(
        reverse("admin:studies_study_changelist"), {"action": "export_csv", "_selected_action": [study.pk]}
    )
    assert response["Content-Type"].startswith("text/csv")


@pytest.mark.parametrize("persona", ["researcher", "annotator_a"])
def test_non_admins_cannot_download_from_the_admin(request, client_for, study, persona):
    client = client_for(request.getfixturevalue(persona))
    response = client.get(reverse("admin:annotate_study_export", args=[study.pk, "csv"]))
    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]


def test_a_zip_can_create_a_new_study(admin_client, db):
    archive = io.BytesIO(good_zip(2))
    archive.name = "new.zip"
    response = admin_client.post(
        reverse("admin:annotate_study_import_zip"),
        {"new_study": "pilot-2", "new_study_protocol": "gender", "archive": archive},
    )
    assert "2 images accepted" in response.content.decode()
    study = Study.objects.get(slug="pilot-2")
    assert study.items.count() == 2
    assert study.questions.get().key == "gender"


def test_a_refused_zip_leaves_no_new_study_behind(admin_client, db):
    archive = io.BytesIO(b"definitely not a zip")
    archive.name = "bad.zip"
    response = admin_client.post(
        reverse("admin:annotate_study_import_zip"),
        {"new_study": "pilot-3", "new_study_protocol": "gender", "archive": archive},
    )
    assert "not a zip file" in response.content.decode()
    assert not Study.objects.filter(slug="pilot-3").exists()


def test_the_upload_form_needs_exactly_one_study(admin_client, study):
    archive = io.BytesIO(good_zip(1))
    archive.name = "x.zip"
    response = admin_client.post(reverse("admin:annotate_study_import_zip"), {"archive": archive})
    assert "Choose an existing study or give the slug of a new one" in response.content.decode()
    assert Image.objects.count() == 0


def test_html_in_a_manifest_path_is_escaped_on_the_result_page(admin_client, study):
    data = make_zip({}, ["<script>alert(1)</script>.png,sdxl,p,c,w,1"])
    page = upload(admin_client, study, data).content.decode()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;.png" in page


# --- bad values never answer 500 nor leave an empty study ---------------------


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("a.png,sdxl,p,c\x00,w,1", "contains a NUL character"),
        ("a.png," + "m" * 201 + ",p,c,w,1", "longer than 200 characters"),
        ("a.png,sdxl,p,c,w,abc", "seed must be an integer"),
    ],
    ids=["nul", "too-long", "bad-seed"],
)
def test_a_zip_whose_only_row_is_bad_lists_it_and_creates_no_study(admin_client, db, row, reason, settings):
    data = make_zip({"a.png": png_bytes(1)}, [row])
    archive = io.BytesIO(data)
    archive.name = "bad-rows.zip"
    response = admin_client.post(
        reverse("admin:annotate_study_import_zip"),
        {"new_study": "pilot-4", "new_study_protocol": "gender", "archive": archive},
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert reason in page
    assert "Nothing was imported: the new study “pilot-4” was not created." in page
    assert not Study.objects.filter(slug="pilot-4").exists()
    assert not any(p.is_file() for p in settings.MEDIA_ROOT.rglob("*"))


def test_a_zip_with_params_holding_nan_imports_the_good_rows_only(admin_client, study):
    manifest = (
        "image,t2i_model,prompt,category,word,seed,index,params\n"
        'ok.png,sdxl,p,c,w,1,0,"{""steps"": 30}"\n'
        'nan.png,sdxl,p,c,w,2,1,"{""guidance"": NaN}"\n'
        "big.png,sdxl,p,c,w,3,2147483648,{}\n"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("manifest.csv", manifest)
        for n, name in enumerate(("ok.png", "nan.png", "big.png")):
            archive.writestr(name, png_bytes(n))
    page = upload(admin_client, study, buffer.getvalue()).content.decode()
    assert "1 images accepted, 0 duplicates (already imported), 2 rejected" in page
    assert "params holds NaN is not a number JSON allows" in page
    assert "index must be at most 2147483647" in page
    assert item_paths() == ["ok.png"]


def test_a_zip_whose_manifest_is_not_utf8_is_refused_with_a_message(admin_client, study):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("manifest.csv", MANIFEST_HEADER.encode() + b"a.png,sdxl,p\xff,c,w,1\n")
        archive.writestr("a.png", png_bytes(1))
    response = upload(admin_client, study, buffer.getvalue())
    assert response.status_code == 200
    assert "not UTF-8 text near line 2" in response.content.decode()
    assert Item.objects.count() == 0


def test_a_database_failure_during_a_zip_import_is_a_message_and_leaves_nothing(
    admin_client, db, monkeypatch, settings
):
    from django.db import IntegrityError

    from studies.imports import manifest_store

    real = manifest_store.rows_insert

    def refuse(model, *args, **kwargs):
        if model is ItemImage:  # the import's last INSERT (multi-row, studies.batching.rows_insert)
            raise IntegrityError("UNIQUE constraint failed")
        return real(model, *args, **kwargs)

    monkeypatch.setattr(manifest_store, "rows_insert", refuse)
    archive = io.BytesIO(good_zip(2))
    archive.name = "x.zip"
    response = admin_client.post(
        reverse("admin:annotate_study_import_zip"),
        {"new_study": "pilot-5", "new_study_protocol": "gender", "archive": archive},
    )
    assert response.status_code == 200
    assert "the database refused the import" in response.content.decode()
    assert not Study.objects.filter(slug="pilot-5").exists()
    assert (Item.objects.count(), Image.objects.count()) == (0, 0)
    assert not any(p.is_file() for p in settings.MEDIA_ROOT.rglob("*"))


def test_the_study_pages_link_to_the_zip_import_and_the_exports(admin_client, study):
    listing = admin_client.get(reverse("admin:studies_study_changelist")).content.decode()
    assert reverse("admin:annotate_study_import_zip") in listing
    page = admin_client.get(reverse("admin:studies_study_change", args=[study.pk])).content.decode()
    assert f"{reverse('admin:annotate_study_import_zip')}?study={study.pk}" in page
    assert reverse("admin:annotate_study_export", args=[study.pk, "json"]) in page


def test_the_study_page_captions_each_question_with_its_key_and_text(admin_client, study):
    page = admin_client.get(reverse("admin:studies_study_change", args=[study.pk])).content.decode()
    question = study.questions.get()
    assert f"{question.key}: {question.text}" in page
    assert f"{study.pk}:{question.key}" not in page


def test_the_study_list_shows_short_columns_and_unbroken_downloads(admin_client, study):
    page = admin_client.get(reverse("admin:studies_study_changelist")).content.decode()
    assert f'<span title="{study.get_protocol_display()}">{study.protocol}</span>' in page
    assert f'<span title="{study.get_agreement_display()}">{study.agreement}</span>' in page
    assert "</a>&nbsp;·&nbsp;<a" in page
    assert study.get_agreement_display() + "</td>" not in page
    assert "labels per item" not in page.lower()  # the column is "N labels"


def test_a_zip_for_a_new_study_needs_its_protocol(admin_client, db):
    archive = io.BytesIO(good_zip(1))
    archive.name = "x.zip"
    response = admin_client.post(
        reverse("admin:annotate_study_import_zip"), {"new_study": "pilot-6", "archive": archive}
    )
    assert "Choose the protocol of the new study." in response.content.decode()
    assert not Study.objects.filter(slug="pilot-6").exists()
