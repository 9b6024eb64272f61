"""A local model directory's files are checked before transformers reads them, and whatever
transformers raises while loading one is a single ``ModelStoreError`` naming the directory."""

import json
import os

import pytest

from grm.models import model_files
from grm.models.hf_load import loading
from grm.models.loading import load_tokenizer
from grm.models.store import ModelStoreError
from grm.models.trained import resolve_model


def _model_dir(tmp_path, **files):
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "llama"}))
    for name, text in files.items():
        (d / name.replace("__", ".")).write_text(text)
    return d


def test_a_fifo_in_place_of_a_file_transformers_reads_is_refused_before_it_blocks(tmp_path):
    d = _model_dir(tmp_path)
    for name in ("tokenizer_config.json", "chat_template.jinja", "tokenizer.json"):
        os.mkfifo(d / name)
        with pytest.raises(ModelStoreError, match=f"{name}: not a regular file"):
            resolve_model(str(d))
        (d / name).unlink()
    assert resolve_model(str(d)) == str(d.resolve())


def test_a_file_larger_than_any_real_models_is_refused_naming_it(tmp_path, monkeypatch):
    d = _model_dir(tmp_path, tokenizer_config__json="{" + " " * 2000 + "}")
    monkeypatch.setitem(model_files.FILE_LIMITS, "tokenizer_config.json", 1000)
    with pytest.raises(ModelStoreError, match=r"tokenizer_config.json: 2,002 bytes, more than the 1,000"):
        resolve_model(str(d))


def test_extra_chat_templates_dangling_links_and_folders_in_place_of_files_are_refused(tmp_path):
    d = _model_dir(tmp_path)
    (d / "additional_chat_templates").mkdir()
    os.mkfifo(d / "additional_chat_templates" / "tools.jinja")
    with pytest.raises(ModelStoreError, match="tools.jinja: not a regular file"):
        resolve_model(str(d))
    (d / "additional_chat_templates" / "tools.jinja").unlink()
    (d / "special_tokens_map.json").symlink_to(tmp_path / "nothing")
    with pytest.raises(ModelStoreError, match="special_tokens_map.json: a symbolic link to nothing"):
        resolve_model(str(d))
    (d / "special_tokens_map.json").unlink()
    (d / "generation_config.json").mkdir()
    with pytest.raises(ModelStoreError, match="generation_config.json: a directory"):
        resolve_model(str(d))


@pytest.mark.parametrize(
    "raised",
    [
        ValueError("Couldn't instantiate the backend tokenizer from one of:\n(1) a `tokenizers` file"),
        json.JSONDecodeError("Expecting value", "{bad", 1),
        OSError("Can't load tokenizer"),
        KeyError("llamaX"),
        RecursionError("maximum recursion depth exceeded"),
    ],
)
def test_whatever_transformers_raises_while_loading_is_one_error_naming_the_directory(raised):
    with pytest.raises(ModelStoreError) as e, loading("/some/model", "tokenizer"):
        raise raised
    message = str(e.value)
    assert message.startswith("/some/model: cannot load the model's tokenizer (") and "\n" not in message


def test_a_directory_transformers_cannot_make_a_tokenizer_of_is_one_error(tmp_path):
    d = _model_dir(tmp_path, tokenizer_config__json="{bad")
    with pytest.raises(ModelStoreError, match=f"{d.resolve()}: cannot load the model's tokenizer"):
        load_tokenizer(str(d))
    (d / "tokenizer_config.json").unlink()  # config.json alone: no tokenizer files at all
    with pytest.raises(ModelStoreError, match=f"{d.resolve()}: cannot load the model's tokenizer"):
        load_tokenizer(str(d))


def test_the_local_tokenizer_is_none_where_showing_it_would_fetch_and_an_error_where_it_cannot_load(monkeypatch, tmp_path):
    from grm.models.loading import local_tokenizer

    monkeypatch.setenv("GRM_HOME", str(tmp_path / "home"))
    assert local_tokenizer("smollm2-135m-instruct") is None  # not fetched: nothing is downloaded to render
    assert local_tokenizer("SomeOrg/some-model") is None  # a hub id
    (tmp_path / "empty").mkdir()
    for bad, says in ((str(tmp_path / "empty"), "no config.json"), ("~nosuchuser_grm/m", "no user"), ("a" * 300, "too long")):
        with pytest.raises(ModelStoreError, match=says):
            local_tokenizer(bad)
