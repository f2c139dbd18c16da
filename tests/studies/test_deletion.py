"""Deleting a study takes its prompts, questions, items and their labels with it; a prompt or a
question still used by another study's rows is refused on its own (``RestrictedError``)."""

from __future__ import annotations

import pytest
from django.db.models import RestrictedError

from annotate import services
from annotate.models import Assignment, FinalLabel, FinalLabelRevision, Label, LabelRevision
from detectors.models import Prediction
from studies.models import Image, Item, ItemImage, Prompt, Question, Study
from tests.annotate.gender import resolve, submit
from tests.factories import ItemFactory, PredictionFactory, PromptFactory, image_of, question_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def labelled(study, annotator_a, annotator_b, researcher):
    """Two items of ``study`` labelled by A and B: one agreed, one disputed and resolved."""
    prompt = PromptFactory(study=study)
    items = [ItemFactory(prompt=prompt), ItemFactory(prompt=prompt)]
    for annotator, values in ((annotator_a, ("male", "male")), (annotator_b, ("male", "female"))):
        services.assignment_queue(study=study, annotator=annotator)
        for item, value in zip(items, values, strict=True):
            submit(item=item, annotator=annotator, value=value)
    resolve(item=items[1], researcher=researcher, value="female", note="long hair")
    for item in items:
        PredictionFactory(image=image_of(item))
    return items


def test_a_study_with_labelled_items_can_be_deleted_with_everything_of_it(study, labelled):
    other = ItemFactory()  # another study's item, prompt and labels stay
    files = [image_of(item) for item in labelled]
    assert FinalLabel.objects.filter(item__in=labelled).count() == 2
    study.delete()
    assert not Study.objects.filter(pk=study.pk).exists()
    for model in (Item, Prompt, Question):
        assert list(model.objects.values_list("study_id", flat=True).distinct()) == [other.study_id]
    assert not ItemImage.objects.exclude(item=other).exists()
    for model in (Label, LabelRevision, FinalLabel, FinalLabelRevision, Assignment):
        assert not model.objects.exists(), model.__name__
    # The files and what detectors said about them are not the study's: they stay.
    assert set(Image.objects.filter(pk__in=[f.pk for f in files])) == set(files)
    assert Prediction.objects.filter(image__in=files).count() == 2


def test_a_prompt_used_by_items_cannot_be_deleted(labelled):
    prompt = labelled[0].prompt
    with pytest.raises(RestrictedError):
        prompt.delete()
    assert Item.objects.filter(prompt=prompt).count() == 2


def test_a_question_with_labels_cannot_be_deleted(labelled):
    question = question_of(labelled[0])
    with pytest.raises(RestrictedError):
        question.delete()
    assert Label.objects.filter(question=question).count() == 4


def test_an_unused_prompt_can_be_deleted(study):
    prompt = PromptFactory(study=study)
    prompt.delete()
    assert not Prompt.objects.filter(pk=prompt.pk).exists()
