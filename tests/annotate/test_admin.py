"""Admin: model pages, zip upload (admins only, zip-slip refused), ground-truth downloads."""

from __future__ import annotations

import csv
import io
import json
import stat
import zipfile

import pytest
from django.urls import reverse

from annotate import services
from annotate.ingest import ZipRejected, images_import_zip
from annotate.models import FinalLabel, FinalLabelSource, Image, Study
from tests.factories import ImageFactory, PromptFactory, png_bytes

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


@pytest.mark.parametrize(
    "model",
    ["study", "prompt", "image", "label", "labelrevision", "finallabel", "finallabelrevision", "assignment"],
)
def test_admin_sees_every_annotate_list(admin_client, study, model, annotator_a):
    image = ImageFactory(prompt=PromptFactory(study=study))
    services.label_import(image=image, annotator=annotator_a, value="male")
    response = admin_client.get(reverse(f"admin:annotate_{model}_changelist"))
    assert response.status_code == 200


def test_image_list_shows_thumbnail_state_and_filters_by_state(admin_client, study, annotator_a, annotator_b):
    prompt = PromptFactory(study=study)
    agreed, untouched = ImageFactory(prompt=prompt), ImageFactory(prompt=prompt)
    for user in (annotator_a, annotator_b):
        services.label_import(image=agreed, annotator=user, value="female")
    url = reverse("admin:annotate_image_changelist")
    page = admin_client.get(url).content.decode()
    assert f'src="/media/{agreed.file}"' in page
    assert "Agreed" in page
    filtered = admin_client.get(url, {"state": "agreed"}).content.decode()
    assert agreed.source_path in filtered
    assert untouched.source_path not in filtered


def test_image_page_shows_labels_and_final_label_history(admin_client, study, annotator_a, annotator_b):
    image = ImageFactory(prompt=PromptFactory(study=study))
    for user in (annotator_a, annotator_b):
        services.label_import(image=image, annotator=user, value="female")
    page = admin_client.get(reverse("admin:annotate_image_change", args=[image.pk])).content.decode()
    assert "anna" in page
    assert "final label history" in page.lower()


def test_labels_cannot_be_added_or_changed_in_the_admin(admin_client, study, annotator_a):
    image = ImageFactory(prompt=PromptFactory(study=study))
    label = services.label_import(image=image, annotator=annotator_a, value="male")
    assert admin_client.get(reverse("admin:annotate_label_add")).status_code == 403
    response = admin_client.post(reverse("admin:annotate_label_change", args=[label.pk]), {"value": "female"})
    assert response.status_code == 403
    label.refresh_from_db()
    assert label.value == "male"


def test_set_final_label_action_goes_through_the_service(admin_client, study, admin_user):
    image = ImageFactory(prompt=PromptFactory(study=study))
    response = admin_client.post(
        reverse("admin:annotate_image_changelist"),
        {"action": "set_final_low_quality", "_selected_action": [image.pk]},
    )
    assert response.status_code == 302
    final = FinalLabel.objects.get(image=image)
    assert (final.value, final.source, final.decided_by) == (
        "low_quality",
        FinalLabelSource.RESOLVED,
        admin_user,
    )
    assert image.final_label_revisions.count() == 1


# --- zip upload ------------------------------------------------------------------------------------


def test_admin_imports_a_zip_and_sees_the_summary(admin_client, study):
    response = upload(admin_client, study, good_zip())
    page = response.content.decode()
    assert response.status_code == 200
    assert "3 images accepted, 0 duplicates (already imported), 0 rejected" in page
    assert Image.objects.filter(study=study).count() == 3


def test_uploading_the_same_zip_twice_changes_nothing(admin_client, study):
    upload(admin_client, study, good_zip())
    before = list(Image.objects.values_list("id", "sha256"))
    page = upload(admin_client, study, good_zip()).content.decode()
    assert "0 images accepted, 3 duplicates" in page
    assert list(Image.objects.values_list("id", "sha256")) == before


def test_bad_rows_in_a_zip_are_listed_with_their_reasons(admin_client, study):
    data = make_zip(
        {"ok.png": png_bytes(1), "broken.png": b"not an image"},
        ["ok.png,sdxl,p,c,w,1", "broken.png,sdxl,p,c,w,2", "../outside.png,sdxl,p,c,w,3"],
    )
    page = upload(admin_client, study, data).content.decode()
    assert "1 images accepted" in page
    assert "not an image" in page
    assert "path with &#x27;..&#x27; refused" in page
    assert list(Image.objects.values_list("source_path", flat=True)) == ["ok.png"]


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
    ImageFactory(prompt=PromptFactory(study=study), source_path="a.png")
    response = admin_client.get(reverse("admin:annotate_study_export", args=[study.pk, "csv"]))
    assert response["Content-Disposition"] == 'attachment; filename="gender-ground-truth.csv"'
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [r["image"] for r in rows] == ["a.png"]
    response = admin_client.get(reverse("admin:annotate_study_export", args=[study.pk, "json"]))
    assert json.loads(response.content)["rows"][0]["image"] == "a.png"


def test_export_action_downloads_the_selected_study(admin_client, study):
    response = admin_client.post(
        reverse("admin:annotate_study_changelist"), {"action": "export_csv", "_selected_action": [study.pk]}
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
        reverse("admin:annotate_study_import_zip"), {"new_study": "pilot-2", "archive": archive}
    )
    assert "2 images accepted" in response.content.decode()
    assert Study.objects.get(slug="pilot-2").images.count() == 2


def test_a_refused_zip_leaves_no_new_study_behind(admin_client, db):
    archive = io.BytesIO(b"definitely not a zip")
    archive.name = "bad.zip"
    response = admin_client.post(
        reverse("admin:annotate_study_import_zip"), {"new_study": "pilot-3", "archive": archive}
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
