"""BLIP-2 detector: the answer parser exhaustively, the plumbing on a tiny BLIP-2 built here."""

from __future__ import annotations

import pytest
from PIL import Image

from detectors import registry
from detectors.base import DetectorUnavailable
from detectors.plugins.blip2 import PROMPT, Blip2Detector, parse_answer
from tests.detectors.tiny_models import token_ids, tower

# --- the parser ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    ["male", "Male", "a male", "man", "a man.", "MAN", "boy", "a young boy", "men", "boys", " male\n"],
)
def test_answers_naming_only_a_male_word_are_male(answer):
    out = parse_answer(answer)
    assert out.verdict == "male"
    assert out.detail == answer.strip()


@pytest.mark.parametrize(
    "answer",
    ["female", "Female", "a female", "woman", "a woman", "WOMAN", "girl", "a little girl", "women", "lady"],
)
def test_answers_naming_only_a_female_word_are_female(answer):
    assert parse_answer(answer).verdict == "female"


@pytest.mark.parametrize(
    "answer",
    [
        "male or female",  # both
        "a man and a woman",
        "female male",
        "",  # neither
        "a person",
        "yes",
        "it is a robot",
        "human",
        "not a male",  # negations are never read as the gender they negate
        "no, female",
        "it isn't a woman",
        "neither",
        "maleficent",  # words, not substrings
        "manly",
        "womanhood",
        "femaleness",
    ],
)
def test_answers_with_both_genders_neither_or_a_negation_are_unparseable(answer):
    out = parse_answer(answer)
    assert (out.verdict, out.filter_reason) == ("filtered", "unparseable")
    assert out.detail == answer.strip()


def test_female_is_not_read_as_male_although_it_contains_male():
    assert parse_answer("female").verdict == "female"
    assert parse_answer("woman").verdict == "female"


# --- configuration ---------------------------------------------------------------------------


def test_registry_resolves_blip2_to_this_detector():
    assert registry.detector_class("blip2") is Blip2Detector


def test_version_names_the_default_checkpoint_and_only_the_name_of_a_local_folder(monkeypatch):
    assert Blip2Detector().version_id == "1+Salesforce/blip2-opt-2.7b"
    monkeypatch.setenv("BIASLAB_BLIP2_WEIGHTS", "/mnt/gpu-host-3/models/blip2-opt-2.7b")
    assert Blip2Detector().version_id == "1+blip2-opt-2.7b"


def test_prompt_is_the_papers_question():
    assert PROMPT == "Question: does the person look like a male or a female? Answer:"


def test_missing_weights_name_the_setting_to_fill(offline_ml_env):
    with pytest.raises(DetectorUnavailable, match="BIASLAB_BLIP2_WEIGHTS"):
        Blip2Detector().load()


def test_a_folder_without_a_saved_model_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("BIASLAB_BLIP2_WEIGHTS", str(tmp_path))
    with pytest.raises(DetectorUnavailable, match="BIASLAB_BLIP2_WEIGHTS"):
        Blip2Detector().load()


# --- a tiny BLIP-2 ---------------------------------------------------------------------------

ANSWER_WORDS = ["Ġfemale", "Ġman", "Ġperson"]


def _tiny_tokenizer():
    """An OPT-style byte-level BPE tokenizer from a hand-made vocabulary (no download)."""
    from tokenizers import pre_tokenizers
    from transformers import GPT2Tokenizer

    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    vocab = {
        tok: i for i, tok in enumerate(specials + sorted(pre_tokenizers.ByteLevel.alphabet()) + ANSWER_WORDS)
    }
    return GPT2Tokenizer(
        vocab=vocab, merges=[], bos_token="</s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )


@pytest.fixture(scope="module")
def tiny_blip2(tmp_path_factory):
    """A random BLIP-2 (vision 32 px, Q-Former and OPT of width 32) saved with its processor."""
    from detectors.torch_compat import ensure_torchvision

    ensure_torchvision()
    import torch
    from transformers import (
        Blip2Config,
        Blip2ForConditionalGeneration,
        Blip2Processor,
        Blip2QFormerConfig,
        Blip2VisionConfig,
        BlipImageProcessor,
        OPTConfig,
    )

    torch.manual_seed(0)
    tokenizer = _tiny_tokenizer()
    image_processor = BlipImageProcessor(size={"height": 32, "width": 32})
    processor = Blip2Processor(image_processor=image_processor, tokenizer=tokenizer, num_query_tokens=4)
    tok = processor.tokenizer
    config = Blip2Config(
        vision_config=Blip2VisionConfig(image_size=32, patch_size=8, **tower(32, 37, 1, 4)).to_dict(),
        qformer_config=Blip2QFormerConfig(encoder_hidden_size=32, **tower(32, 37, 1, 4)).to_dict(),
        text_config=OPTConfig(
            vocab_size=len(tok),
            hidden_size=32,
            ffn_dim=37,
            num_hidden_layers=1,
            num_attention_heads=4,
            word_embed_proj_dim=32,
            max_position_embeddings=128,
            tie_word_embeddings=False,
            **token_ids(tok),
        ).to_dict(),
        num_query_tokens=4,
        image_token_index=tok.convert_tokens_to_ids("<image>"),
        tie_word_embeddings=False,
    )
    model = Blip2ForConditionalGeneration(config).eval()
    folder = tmp_path_factory.mktemp("tiny-blip2")
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def _rig_to_always_say(folder, token: str, out_dir):
    """Copy of the tiny model whose language model emits ``token`` at every step.

    The final layer norm is zeroed except for a bias on dimension 0, and only ``token``'s row of
    the output head reads that dimension — so its logit is 1 and every other logit 0.
    """
    import torch
    from transformers import Blip2ForConditionalGeneration, Blip2Processor

    model = Blip2ForConditionalGeneration.from_pretrained(folder)
    processor = Blip2Processor.from_pretrained(folder)
    lm = model.language_model
    token_id = processor.tokenizer.convert_tokens_to_ids(token)
    with torch.no_grad():
        norm = lm.model.decoder.final_layer_norm
        norm.weight.zero_()
        norm.bias.zero_()
        norm.bias[0] = 1.0
        head = lm.get_output_embeddings()
        assert head.weight.data_ptr() != lm.get_input_embeddings().weight.data_ptr()
        head.weight.zero_()
        head.weight[token_id, 0] = 1.0
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return out_dir


def _photos():
    return [
        Image.new("RGB", (40, 30), (200, 120, 90)),
        Image.new("L", (64, 64), 128),  # greyscale input is converted, not rejected
        Image.new("RGB", (17, 90), (10, 20, 30)),
    ]


def test_tiny_blip2_answers_once_per_image_and_keeps_the_raw_answer(tiny_blip2, monkeypatch):
    monkeypatch.setenv("BIASLAB_BLIP2_WEIGHTS", str(tiny_blip2))
    det = Blip2Detector(max_new_tokens=3)
    outs = det.predict(_photos())
    assert len(outs) == 3
    answers = det.answers(_photos())
    # Greedy decoding: the same image gives the same answer, and it is what the verdict keeps.
    assert [o.detail for o in outs] == answers
    assert all(o == parse_answer(a) for o, a in zip(outs, answers, strict=True))
    assert det.version_id == f"1+{tiny_blip2.name}"


@pytest.mark.parametrize(("token", "verdict"), [("Ġfemale", "female"), ("Ġman", "male")])
def test_the_answer_alone_is_parsed_not_the_question_that_names_both(tiny_blip2, tmp_path, token, verdict):
    # If the prompt ("a male or a female") were left in the decoded text, both genders would be
    # named and the verdict would be unparseable.
    folder = _rig_to_always_say(tiny_blip2, token, tmp_path / "rigged")
    det = Blip2Detector(weights=str(folder), max_new_tokens=2)
    outs = det.predict(_photos()[:2])
    word = token.lstrip("Ġ")
    assert [o.verdict for o in outs] == [verdict, verdict]
    assert outs[0].detail == f"{word} {word}"


def test_an_answer_naming_no_gender_is_filtered_with_the_answer_kept(tiny_blip2, tmp_path):
    folder = _rig_to_always_say(tiny_blip2, "Ġperson", tmp_path / "rigged")
    out = Blip2Detector(weights=str(folder), max_new_tokens=1).predict(_photos()[:1])[0]
    assert (out.verdict, out.filter_reason, out.detail) == ("filtered", "unparseable", "person")


def test_an_empty_batch_returns_no_outputs(tiny_blip2):
    assert Blip2Detector(weights=str(tiny_blip2)).predict([]) == []


def test_dtype_takes_the_clip_detectors_short_names_and_refuses_others():
    from detectors.base import DetectorOptionError

    assert Blip2Detector(dtype="bf16").dtype_name == "bfloat16"
    assert Blip2Detector(dtype="float16").dtype_name == "float16"
    with pytest.raises(DetectorOptionError, match="blip2's dtype must be one of bf16, fp16, fp32"):
        Blip2Detector(dtype="int8")
