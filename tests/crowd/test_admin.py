"""The admin lists participants (panel id, start, finish, items, time) and closes links."""

from __future__ import annotations

from annotate import services as annotate_services
from crowd.models import JoinLink
from crowd.services import participant_finish, participant_join
from tests.annotate.gender import submit


def test_the_admin_lists_participants_with_their_items_and_closes_links(
    client_for, admin_user, make_link, items, study
):
    link, _ = make_link(quota=1)
    participant, _ = participant_join(link=link, panel_id="pid-in-admin")
    seat = annotate_services.assignment_queue(study=study, annotator=participant.user, size=1)[0]
    submit(item=seat.item, annotator=participant.user, value="male")
    participant_finish(participant=participant)
    client = client_for(admin_user)
    page = client.get("/admin/crowd/participant/").content.decode()
    assert "pid-in-admin" in page
    assert '<td class="field-items">1</td>' in page
    assert '<td class="field-seconds">0</td>' in page
    assert client.get("/admin/crowd/joinlink/add/").status_code == 403
    client.post("/admin/crowd/joinlink/", {"action": "close", "_selected_action": [link.pk]})
    assert JoinLink.objects.get().closed_at is not None
