# A database trigger deletes an account's API tokens when its is_active goes from true to false,
# however the change is made: the model's save(), a queryset's update() (which sends no signal),
# the admin, a shell or plain SQL. A later reactivation, made any way, then brings no token back.
# SQLite and PostgreSQL (the databases BiasLab runs on); on another database nothing is created
# and the token check's own sweep (accounts.authentication) is what remains.

from django.conf import settings
from django.db import migrations

TRIGGER = "accounts_apitoken_revoke_on_deactivation"


def _names(apps, schema_editor):
    quote = schema_editor.quote_name
    user_table = apps.get_model(settings.AUTH_USER_MODEL)._meta.db_table
    token_table = apps.get_model("accounts", "ApiToken")._meta.db_table
    return quote(TRIGGER), quote(user_table), quote(token_table)


def create_trigger(apps, schema_editor):
    trigger, users, tokens = _names(apps, schema_editor)
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        schema_editor.execute(
            f"CREATE TRIGGER {trigger} AFTER UPDATE OF is_active ON {users} "
            "FOR EACH ROW WHEN OLD.is_active AND NOT NEW.is_active "
            f"BEGIN DELETE FROM {tokens} WHERE user_id = NEW.id; END"
        )
    elif vendor == "postgresql":
        schema_editor.execute(
            f"CREATE FUNCTION {trigger}() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN DELETE FROM {tokens} WHERE user_id = NEW.id; RETURN NULL; END $$"
        )
        schema_editor.execute(
            f"CREATE TRIGGER {trigger} AFTER UPDATE OF is_active ON {users} "
            "FOR EACH ROW WHEN (OLD.is_active AND NOT NEW.is_active) "
            f"EXECUTE FUNCTION {trigger}()"
        )


def drop_trigger(apps, schema_editor):
    trigger, users, _ = _names(apps, schema_editor)
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    elif vendor == "postgresql":
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {trigger} ON {users}")
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {trigger}()")


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_apitoken_user_no_own_index"),
        # After every migration of the user table: rebuilding a SQLite table drops its triggers.
        ("auth", "0012_alter_user_first_name_max_length"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [migrations.RunPython(create_trigger, drop_trigger, elidable=False)]
