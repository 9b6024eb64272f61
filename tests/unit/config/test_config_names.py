"""Names that become paths stay names, and ``builtin:`` references stay inside the builtin library.

A pipeline's ``name`` makes its run directory (``runs/NAME-TIMESTAMP``), a judge's its gate
directory; ``grm validate`` refuses what ``grm run`` would refuse, with ``FILE:LINE: name``.
"""

from pathlib import Path

import pytest

from grm.config import ConfigError, load, validate_tree
from grm.config import paths as paths_mod
from grm.config.names import RUNS, run_dir
from grm.config.paths import builtin_dir, resolve_builtin, resolve_path
from grm.config.resolve import load_pipeline

PIPE = """\
name: {name}
pools: {{a: {{cpus: 1}}}}
policy: {{spec: {policy}, pool: a}}
judges:
  - {{spec: {judge}}}
data: {{prompts: {data}}}
"""
DEFAULTS = {
    "name": "t",
    "policy": "builtin:smollm2-135m-instruct",
    "judge": "builtin:numeric-answer",
    "data": "builtin:arith-prompts",
}

BAD_NAMES = ["../../etc", "a/b", "/abs", ".", "..", ".hidden", "a\\b", "a\x00b", "", " x", "x y", "é", "ｎａｍｅ", "a" * 101,
             "%2e%2e", "~", "-rf", "a\nb"]  # fmt: skip
GOOD_NAMES = ["quickstart", "a", "Run_2.v3-final", "0", "x" * 100]


def pipeline(tmp_path: Path, **kw: str) -> Path:
    f = tmp_path / "p.yaml"
    fields = {k: repr(v).replace("'", '"') if k == "name" else v for k, v in {**DEFAULTS, **kw}.items()}
    f.write_text(PIPE.format(**fields))
    return f


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_a_name_that_is_not_one_path_component_is_refused_by_validate_and_run_alike(tmp_path, name):
    f = pipeline(tmp_path, name=name)
    for check in (validate_tree, load_pipeline):
        with pytest.raises(ConfigError) as e:
            check(f)
        assert str(e.value).startswith(f"{f}:1: name: "), str(e.value)
    judge = tmp_path / "j.yaml"
    judge.write_text(f"name: {repr(name).replace(chr(39), chr(34))}\nmode: rule\nrule: {{type: exact-match}}\n")
    with pytest.raises(ConfigError, match=f"{judge}:1: name: "):
        load(judge)
    policy = tmp_path / "pol.yaml"
    policy.write_text(f"name: {repr(name).replace(chr(39), chr(34))}\nmodel: m\n")
    with pytest.raises(ConfigError, match=f"{policy}:1: name: "):
        load(policy)


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_a_good_name_makes_one_directory_inside_runs(tmp_path, name):
    spec = load_pipeline(pipeline(tmp_path, name=name)).spec
    d = run_dir(spec.name, spec.out_dir, "20250101-000000")
    assert d.parent == RUNS and d.name == f"{name}-20250101-000000"


def test_run_dir_checks_the_name_again_and_keeps_an_explicit_out_dir(tmp_path):
    with pytest.raises(ValueError, match="cannot name a directory"):
        run_dir("../x", None, "20250101-000000")  # a spec built in code, never validated
    assert run_dir("../x", "/somewhere/else", "s") == Path("/somewhere/else")
    f = pipeline(tmp_path)
    for bad in ("''", '"a\\0b"'):
        f.write_text(f.read_text() + f"out_dir: {bad}\n")
        with pytest.raises(ConfigError, match=f"{f}:7: out_dir: must be a path"):
            load(f)
        f = pipeline(tmp_path)


ESCAPES = ["../judges/format", "../../README.md", "/etc/passwd", "..%2F..%2Fetc%2Fpasswd", "%2e%2e/x", "a\x00b", "", ".", "..",
           "judges/format", "~/x", "..\\..\\x", "format/../format", " format", "file:///etc/passwd", "x" * 300]  # fmt: skip


@pytest.mark.parametrize("kind", ["policy", "judges", "prompts", "pipelines"])
@pytest.mark.parametrize("name", ESCAPES, ids=repr)
def test_builtin_names_cannot_leave_the_library(kind, name):
    with pytest.raises(FileNotFoundError, match="is not a builtin name|no builtin"):
        resolve_builtin(name, kind)
    with pytest.raises(FileNotFoundError):
        resolve_path(f"builtin:{name}", Path.cwd(), kind)


@pytest.mark.parametrize(
    ("field", "line"), [("policy", 3), ("judge", 5), ("data", 6)]
)  # fmt: skip
@pytest.mark.parametrize("name", ["../judges/format", "/etc/passwd", "..%2Fx", "a\x00b"], ids=repr)
def test_every_builtin_reference_in_a_pipeline_is_checked_at_load(tmp_path, field, line, name):
    f = pipeline(tmp_path, **{field: f'"builtin:{name}"'.replace("\x00", "\\0")})
    with pytest.raises(ConfigError) as e:
        validate_tree(f)
    assert str(e.value).startswith(f"{f}:{line}: "), str(e.value)
    assert "builtin" in str(e.value)


def test_a_template_reference_is_checked_too(tmp_path):
    j = tmp_path / "j.yaml"
    j.write_text("name: j\nmode: pointwise\nmodel: m\ntemplate: builtin:../prompts/pointwise-score.j2\n")
    with pytest.raises(ConfigError, match=f"{j}:4: template: builtin:'../prompts/pointwise-score.j2' is not a builtin name"):
        load(j)
    j.write_text(
        "name: j\nmode: pointwise\nmodel: m\ntemplate: builtin:pointwise-score\nprinciples: {template: builtin:/etc/passwd}\n"
    )
    with pytest.raises(ConfigError, match=f"{j}:5: principles.template: "):
        load(j)


def test_a_link_in_the_library_that_points_outside_is_refused(tmp_path, monkeypatch):
    lib = tmp_path / "lib"
    for kind in ("policy", "judges", "prompts", "pipelines"):
        (lib / kind).mkdir(parents=True)
    (tmp_path / "secret.yaml").write_text("name: s\nmodel: m\n")
    (lib / "policy" / "inside.yaml").write_text("name: i\nmodel: m\n")
    (lib / "policy" / "out.yaml").symlink_to(tmp_path / "secret.yaml")
    (lib / "policy" / "alias.yaml").symlink_to(lib / "policy" / "inside.yaml")
    monkeypatch.setattr(paths_mod, "builtin_dir", lambda kind: lib / kind)
    assert resolve_builtin("inside", "policy") == lib / "policy" / "inside.yaml"
    assert resolve_builtin("alias", "policy") == lib / "policy" / "alias.yaml"  # a link within the library is fine
    with pytest.raises(FileNotFoundError, match="builtin:out links outside the builtin library"):
        resolve_builtin("out", "policy")


def test_the_shipped_library_resolves_as_before():
    assert resolve_builtin("smollm2-135m-instruct", "policy") == builtin_dir("policy") / "smollm2-135m-instruct.yaml"
    assert resolve_builtin("pointwise-score", "prompts").suffix == ".j2"
    assert resolve_builtin("quickstart.yaml", "pipelines").name == "quickstart.yaml"


def test_a_spec_reference_finds_only_its_own_kind(tmp_path):
    """A judge named builtin:quickstart is not the quickstart pipeline (found by the fuzzer: it was
    loaded as a judge, and the errors named the pipeline's file, not the reference's line)."""
    f = pipeline(tmp_path, judge="builtin:quickstart")
    with pytest.raises(ConfigError, match=rf"{f}:5: judges.0.spec: no builtin judges named 'quickstart'"):
        validate_tree(f)
    f = pipeline(tmp_path, policy="builtin:numeric-answer")
    with pytest.raises(ConfigError, match=rf"{f}:3: policy.spec: no builtin policy named 'numeric-answer'"):
        validate_tree(f)
    # a file given to grm validate or grm run may be of any kind
    assert resolve_builtin("helpfulness-pointwise", "pipelines").parent == builtin_dir("judges")
