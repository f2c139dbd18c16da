"""The role groups (``studies.permissions.ROLE_GROUPS``) exist once the database is migrated, so
nobody has to create them in the admin. Unapplied, it removes only the groups nobody is in."""

from django.db import migrations

from studies.permissions import ROLE_GROUPS


def groups_create(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    for name in ROLE_GROUPS:
        Group.objects.using(schema_editor.connection.alias).get_or_create(name=name)


def empty_groups_remove(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    groups = Group.objects.using(schema_editor.connection.alias).filter(name__in=ROLE_GROUPS)
    groups.filter(user__isnull=True).delete()


class Migration(migrations.Migration):

    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("studies", "0011_item_change_restored"),
    ]

    operations = [migrations.RunPython(groups_create, empty_groups_remove)]
