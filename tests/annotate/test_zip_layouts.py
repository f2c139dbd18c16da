"""Admin zip import: the layouts zip tools really make.

Accepted: a single top folder wrapping everything, ``__MACOSX/`` and ``.DS_Store`` beside the
files, nested folders, a manifest below the root (image paths are relative to its folder),
backslashes as separators. Refused whole with a message, never a 500: several manifests, no
manifest, names that clash once unpacked, an unreadable compression method. The zip-slip and
size protections hold whatever the layout.
"""

from __future__ import annotations

import io
import zipfile

import pytest
from django.urls import reverse

from studies.ingest import ZipRejected, images_import_zip
from studies.models import Image, Item, ItemImage
from tests.factories import png_bytes

HEADER = "image,t2i_model,prompt,category,word,seed\n"


def manifest(*paths: str) -> bytes:
    rows = "".join(f"{path},sdxl,a photo of a nurse,profession,nurse,{i}\n" for i, path in enumerate(paths))
    return (HEADER + rows).encode()


def zip_of(members: dict[str, bytes]) -> bytes:
    """A zip holding exactly these member names (backslashes kept as written, as Windows tools do)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(zipfile.ZipInfo(name), data)
    return buffer.getvalue()


def upload(client, study, data: bytes):
    archive = io.BytesIO(data)
    archive.name = "upload.zip"
    return client.post(reverse("admin:annotate_study_import_zip"), {"study": study.pk, "archive": archive})


@pytest.fixture
def admin_client(client_for, admin_user):
    return client_for(admin_user)


def imported(study) -> list[str]:
    """The manifest paths of the study's imported images (one-image items: the item's key too)."""
    return sorted(ItemImage.objects.filter(item__study=study).values_list("source_path", flat=True))


# --- accepted layouts ----------------------------------------------------------------------------


def test_a_single_top_folder_wrapping_everything_is_accepted(admin_client, study):
    data = zip_of(
        {
            "batch/": b"",
            "batch/manifest.csv": manifest("sdxl/0.png", "sdxl/1.png"),
            "batch/sdxl/": b"",
            "batch/sdxl/0.png": png_bytes(300),
            "batch/sdxl/1.png": png_bytes(301),
        }
    )
    response = upload(admin_client, study, data)
    assert response.status_code == 200
    assert "2 images accepted, 0 duplicates (already imported), 0 rejected" in response.content.decode()
    assert imported(study) == ["sdxl/0.png", "sdxl/1.png"]


def test_macos_resource_forks_and_ds_store_files_are_ignored(admin_client, study):
    # What Finder's "Compress" makes of a folder: the folder, plus __MACOSX/ beside it.
    data = zip_of(
        {
            "batch/manifest.csv": manifest("sdxl/0.png"),
            "batch/sdxl/0.png": png_bytes(302),
            "batch/.DS_Store": b"\0\0\0\1Bud1",
            "batch/sdxl/.DS_Store": b"\0\0\0\1Bud1",
            "batch/sdxl/._0.png": b"\0\5\26\7 AppleDouble",
            "__MACOSX/batch/._manifest.csv": b"\0\5\26\7 AppleDouble",
            "__MACOSX/batch/manifest.csv": manifest("nothing.png"),
            "__MACOSX/batch/sdxl/._0.png": b"\0\5\26\7 AppleDouble",
        }
    )
    response = upload(admin_client, study, data)
    assert "1 images accepted, 0 duplicates (already imported), 0 rejected" in response.content.decode()
    assert imported(study) == ["sdxl/0.png"]


def test_nested_folders_below_the_manifest_are_accepted(admin_client, study):
    data = zip_of(
        {
            "manifest.csv": manifest("sdxl/run-1/seed-0/0.png", "sd3/a/b/c/d/1.png"),
            "sdxl/run-1/seed-0/0.png": png_bytes(303),
            "sd3/a/b/c/d/1.png": png_bytes(304),
        }
    )
    upload(admin_client, study, data)
    assert imported(study) == ["sd3/a/b/c/d/1.png", "sdxl/run-1/seed-0/0.png"]


def test_a_manifest_below_the_root_reads_paths_from_its_own_folder(admin_client, study):
    data = zip_of(
        {
            "README.txt": b"made by the lab's export script",
            "export/2026-11/manifest.csv": manifest("img/0.png"),
            "export/2026-11/img/0.png": png_bytes(305),
            "other/unrelated.png": png_bytes(306),
        }
    )
    response = upload(admin_client, study, data)
    assert "1 images accepted" in response.content.decode()
    assert imported(study) == ["img/0.png"]


def test_backslash_separators_in_member_names_and_manifest_paths_are_normalised(admin_client, study):
    data = zip_of(
        {
            "batch\\manifest.csv": manifest("sdxl\\0.png", "sdxl/1.png"),
            "batch\\sdxl\\": b"",
            "batch\\sdxl\\0.png": png_bytes(307),
            "batch\\sdxl\\1.png": png_bytes(308),
        }
    )
    response = upload(admin_client, study, data)
    assert "2 images accepted, 0 duplicates (already imported), 0 rejected" in response.content.decode()
    # The manifest's own spelling is the image's key, as for any import.
    assert imported(study) == ["sdxl/1.png", "sdxl\\0.png"]


def test_dot_folders_and_doubled_slashes_in_member_names_are_harmless(admin_client, study):
    data = zip_of({"./batch//manifest.csv": manifest("0.png"), "./batch/./0.png": png_bytes(309)})
    response = upload(admin_client, study, data)
    assert "1 images accepted" in response.content.decode()


# --- refused layouts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("members", "message"),
    [
        (
            {
                "a/manifest.csv": manifest("0.png"),
                "b/manifest.csv": manifest("0.png"),
                "a/0.png": png_bytes(1),
            },
            "several manifest.csv files (a/manifest.csv, b/manifest.csv)",
        ),
        (
            {
                "manifest.csv": manifest("0.png"),
                "old\\manifest.csv": manifest("0.png"),
                "0.png": png_bytes(1),
            },
            "several manifest.csv files (manifest.csv, old/manifest.csv)",
        ),
        ({"sdxl/0.png": png_bytes(1)}, "no manifest.csv at its root or in any of its folders"),
        ({"__MACOSX/manifest.csv": manifest("0.png")}, "no manifest.csv"),
        ({"manifest.csv/": b"", "0.png": png_bytes(1)}, "no manifest.csv"),
        ({}, "no manifest.csv"),
        (
            {"manifest.csv": manifest("sdxl/0.png"), "sdxl": b"a file", "sdxl/0.png": png_bytes(1)},
            "cannot be unpacked",
        ),
        (
            {"manifest.csv": manifest("sdxl/0.png"), "sdxl/0.png": png_bytes(1), "sdxl\\0.png": png_bytes(2)},
            "holds sdxl/0.png twice",
        ),
        ({"manifest.csv": manifest("0.png"), "..\\evil.png": png_bytes(1)}, "points outside the archive"),
        ({"manifest.csv": manifest("0.png"), "C:\\evil.png": png_bytes(1)}, "has an absolute path"),
        ({"manifest.csv": manifest("0.png"), "__MACOSX/../../evil.png": b"x"}, "points outside the archive"),
    ],
    ids=[
        "two-manifests",
        "two-manifests-backslash",
        "no-manifest",
        "manifest-only-in-macosx",
        "manifest-is-a-folder",
        "empty-zip",
        "file-and-folder-clash",
        "same-name-twice",
        "backslash-dot-dot",
        "drive-letter",
        "dot-dot-in-ignored-folder",
    ],
)
def test_unusable_layouts_are_refused_whole_with_a_message(admin_client, study, members, message, tmp_path):
    response = upload(admin_client, study, zip_of(members))
    assert response.status_code == 200
    assert message in response.content.decode()
    assert Image.objects.count() == 0
    assert Item.objects.count() == 0
    assert not (tmp_path.parent / "evil.png").exists()


def test_an_unsupported_compression_method_is_refused_not_a_crash(admin_client, study):
    data = bytearray(zip_of({"manifest.csv": manifest("0.png"), "0.png": png_bytes(1)}))
    # Rewrite both headers' method field to 9 (Deflate64, which Windows writes for large files
    # and Python cannot read).
    for signature, offset in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
        start = 0
        while (start := data.find(signature, start)) != -1:
            data[start + offset : start + offset + 2] = (9).to_bytes(2, "little")
            start += 4
    response = upload(admin_client, study, bytes(data))
    assert response.status_code == 200
    assert "compression method" in response.content.decode()
    assert Image.objects.count() == 0
    assert Item.objects.count() == 0


def test_the_size_limit_counts_every_member_whatever_the_layout(study, settings):
    settings.BIASLAB_MAX_UPLOAD_BYTES = 200_000
    bomb = zip_of({"batch/manifest.csv": manifest("0.png"), "__MACOSX/batch/zeros.bin": b"\0" * 300_000})
    with pytest.raises(ZipRejected, match="expands to more than 200000 bytes"):
        images_import_zip(study=study, zip_file=io.BytesIO(bomb))


def test_a_zip_upload_leaves_planner_statistics_of_its_items(admin_client, study):
    # Like the import commands, the admin's upload refreshes the planner statistics
    # (studies.database): a freshly imported study is planned with its real size.
    from django.db import connection

    data = zip_of(
        {"manifest.csv": manifest("a.png", "b.png"), "a.png": png_bytes(310), "b.png": png_bytes(311)}
    )
    assert upload(admin_client, study, data).status_code == 200
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT reltuples FROM pg_class WHERE relname = %s", [Item._meta.db_table])
            assert cursor.fetchone()[0] >= 2
        else:
            cursor.execute("SELECT stat FROM sqlite_stat1 WHERE tbl = %s", [Item._meta.db_table])
            assert [int(row[0].split()[0]) for row in cursor.fetchall()][:1] == [2]
