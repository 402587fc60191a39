"""``tokenizer.special_tokens`` / ``tokenizer.added_tokens`` (axolotl's ``special_tokens`` / ``tokens``) on a
tokenizer folder saved here: the tokenizer's own token is a no-op, a new one is added and the embeddings grow."""

from honing.config.data_schema import TokenizerSection
from honing.data.special_tokens import apply_token_settings
from honing.data.tokenizer import EOS_TOKEN, PAD_TOKEN, build_tokenizer, load_pretrained_tokenizer
from honing.recipes.build_run import run_assets
from honing.recipes.sft import SFTRecipe
from tests.helpers import tiny_llama
from tests.recipes.test_sft import sft_config


def saved_model(folder):
    """A byte tokenizer and a tiny Llama of exactly its vocabulary, saved as a Hugging Face folder."""
    tokenizer = build_tokenizer("byte")
    tokenizer.save_pretrained(folder)
    tiny_llama(vocab=len(tokenizer)).save_pretrained(folder)
    return len(tokenizer)


def test_the_tokenizers_own_tokens_change_nothing(tmp_path):
    saved_model(tmp_path)
    tokenizer = load_pretrained_tokenizer(str(tmp_path))
    before = (len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id)
    own = {"eos_token": EOS_TOKEN, "pad_token": PAD_TOKEN}
    section = TokenizerSection(special_tokens=own, added_tokens=[EOS_TOKEN])
    assert apply_token_settings(tokenizer, section) == 0
    assert (len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id) == before


def test_new_tokens_are_added_set_and_kept_whole(tmp_path):
    size = saved_model(tmp_path)
    tokenizer = load_pretrained_tokenizer(str(tmp_path))
    section = TokenizerSection(special_tokens={"bos_token": "<s>", "eos_token": "</s>"}, added_tokens=["<tool>"])
    assert apply_token_settings(tokenizer, section) == 3
    assert len(tokenizer) == size + 3
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<s>", "</s>")
    assert tokenizer.eos_token_id == tokenizer.convert_tokens_to_ids("</s>") >= size
    ids = tokenizer("a<tool>b</s>", add_special_tokens=False)["input_ids"]
    assert ids == [ord("a"), tokenizer.convert_tokens_to_ids("<tool>"), ord("b"), tokenizer.eos_token_id]


def test_an_sft_run_grows_the_pretrained_models_embeddings_to_the_new_tokens(tmp_path):
    size = saved_model(tmp_path / "model")
    config = sft_config(
        tmp_path,
        tokenizer={"special_tokens": {"eos_token": "</s>", "pad_token": PAD_TOKEN}, "added_tokens": ["<tool>"]},
        model={"config": None, "name_or_path": str(tmp_path / "model")},
    )
    recipe = SFTRecipe(config)
    model = recipe.build_model(run_assets(recipe))
    assert recipe.tokenizer.eos_token == "</s>" and recipe.tokenizer.pad_token == PAD_TOKEN
    # </s> and <tool>, then chatml's <|im_start|> / <|im_end|> for data.chat_template
    assert len(recipe.tokenizer) == size + 4
    assert model.get_input_embeddings().weight.shape[0] == len(recipe.tokenizer)


def test_lora_without_an_embedding_to_train_is_warned_about_new_tokens(tmp_path, caplog):
    saved_model(tmp_path / "model")
    lora = {"rank": 4, "alpha": 8, "target_modules": "all-linear"}
    for name, modules in (("frozen", []), ("trained", ["embed_tokens", "lm_head"])):
        config = sft_config(
            tmp_path / name,
            tokenizer={"added_tokens": ["<tool>"]},
            model={
                "config": None,
                "name_or_path": str(tmp_path / "model"),
                "lora": {**lora, "modules_to_save": modules},
            },
        )
        recipe = SFTRecipe(config)
        assets = recipe.model_assets()
        caplog.clear()
        recipe.build_model(assets)
        warned = [r.message for r in caplog.records if "LoRA trains no embedding" in r.getMessage()]
        assert len(warned) == (1 if name == "frozen" else 0), name
