"""The signatures that cross processes say what crosses: every parameter and return of the role
actors' methods, the policy handle (one rank or a worker group), the reference handle and the
roles the scheduler calls is annotated, and none is ``Any`` (an unannotated one is ``Any`` too).
The call protocols agree with the actor methods they stand for."""

import dataclasses
import inspect
import re

import pytest

ANY = re.compile(r"\bAny\b")


def actor_class(remote_class):
    """The class a ``@ray.remote`` decorator wrapped."""
    return remote_class.__ray_actor_class__


def own_methods(cls) -> dict[str, object]:
    """Public methods grm defines on ``cls`` or its bases, and its ``__init__`` (not one that
    ``typing.Protocol`` puts there)."""
    out = {}
    for klass in reversed(cls.__mro__[:-1]):
        for name, fn in vars(klass).items():
            if inspect.isfunction(fn) and fn.__module__.startswith("grm.") and (not name.startswith("_") or name == "__init__"):
                out[name] = fn
    return out


def untyped(fn) -> list[str]:
    """The parameters (and ``return``) of ``fn`` whose annotation is missing or mentions ``Any``."""
    bad = []
    for p in inspect.signature(fn).parameters.values():
        if p.name == "self" or p.name.startswith("_ray"):  # Ray adds a tracing keyword
            continue
        if p.annotation is inspect.Parameter.empty or ANY.search(str(p.annotation)):
            bad.append(f"{p.name}: {p.annotation}")
    ret = inspect.signature(fn).return_annotation
    if fn.__name__ != "__init__" and (ret is inspect.Signature.empty or ANY.search(str(ret))):
        bad.append(f"return: {ret}")
    return bad


def actor_classes():
    from grm.orchestrator.actors import PolicyActor
    from grm.orchestrator.frozen_actors import JudgeActor, ReferenceActor

    return [actor_class(c) for c in (PolicyActor, ReferenceActor, JudgeActor)]


def handle_classes():
    from grm.orchestrator import handles
    from grm.orchestrator.policy_group import GroupMethod, PolicyGroup, _Rank0, _Split

    protocols = [v for v in vars(handles).values() if inspect.isclass(v) and v.__module__ == handles.__name__]
    return [*protocols, PolicyGroup, GroupMethod, _Rank0, _Split]


@pytest.mark.parametrize("cls", actor_classes(), ids=lambda c: c.__name__)
def test_every_remote_method_of_a_role_actor_is_typed_without_any(cls):
    methods = own_methods(cls)
    assert "__init__" in methods
    bad = {name: b for name, fn in methods.items() if (b := untyped(fn))}
    assert bad == {}, f"{cls.__name__}: {bad}"


@pytest.mark.parametrize("cls", handle_classes(), ids=lambda c: c.__name__)
def test_the_handles_and_the_worker_group_are_typed_without_any(cls):
    bad = {name: b for name, fn in own_methods(cls).items() if (b := untyped(fn))}
    fields = {k: v for k, v in getattr(cls, "__annotations__", {}).items() if ANY.search(str(v))}
    assert bad == {} and fields == {}, f"{cls.__name__}: {bad} {fields}"


def test_the_roles_the_scheduler_calls_are_typed_without_any():
    from grm.orchestrator.roles import JudgeHandle, Roles

    for cls in (Roles, JudgeHandle):
        fields = {f.name: str(f.type) for f in dataclasses.fields(cls)}
        assert {k: v for k, v in fields.items() if ANY.search(v)} == {}, cls.__name__
        bad = {name: b for name, fn in own_methods(cls).items() if (b := untyped(fn))}
        assert bad == {}, f"{cls.__name__}: {bad}"
    assert fields_of(Roles)["policy"] == "PolicyHandle" and fields_of(Roles)["reference"] == "ReferenceHandle | None"


def fields_of(cls) -> dict[str, str]:
    return {f.name: str(f.type) for f in dataclasses.fields(cls)}


def test_the_checker_itself_catches_any_and_a_missing_annotation():
    from typing import Any

    def loose(self, batch: Any, others=()) -> tuple[Any, ...]: ...

    def tight(self, batch: "TrainBatch", others: "Sequence[ObjectRef]" = ()) -> "Prepared": ...  # noqa: F821

    assert untyped(loose) == ["batch: typing.Any", "others: <class 'inspect._empty'>", "return: tuple[typing.Any, ...]"]
    assert untyped(tight) == []


@pytest.mark.parametrize(
    ("member", "method"),
    [
        ("rollout", "rollout"),
        ("prepare", "prepare"),
        ("train", "train"),
        ("sync", "sync"),
        ("save", "save"),
        ("sees", "sees"),
        ("load", "load"),
        ("train_progress", "train_progress"),
    ],
)
def test_each_call_of_the_policy_handle_matches_the_actor_method_it_reaches(member, method):
    """``policy.NAME.remote(args)`` takes the actor method's leading parameters (the group adds
    ``positions`` and ``others`` itself; a parameter the call passes as ``ObjectRef[X]`` arrives
    as ``X``, Ray resolving it) and its ref holds what the method returns."""
    from grm.orchestrator import handles
    from grm.orchestrator.actors import PolicyActor

    protocol = getattr(handles, handles.PolicyHandle.__annotations__[member])
    call = inspect.signature(protocol.remote)
    actor = inspect.signature(own_methods(actor_class(PolicyActor))[method])
    resolved = re.compile(r"^ObjectRef\[(.*)\]( \| None)?$")
    want = [(p.name, resolved.sub(r"\1\2", p.annotation)) for p in call.parameters.values() if p.name != "self"]
    have = [(p.name, p.annotation) for p in actor.parameters.values() if p.name != "self"][: len(want)]
    assert want == have
    assert call.return_annotation == f"ObjectRef[{actor.return_annotation}]"


def test_a_one_rank_group_has_every_member_of_the_policy_handle():
    from types import SimpleNamespace

    from grm.orchestrator.handles import PolicyHandle
    from grm.orchestrator.policy_group import PolicyGroup

    members = [m for m in PolicyHandle.__annotations__] + ["diagnose", "actor_roles"]
    group = PolicyGroup([SimpleNamespace()], hf_rollout=True)
    assert [m for m in members if not hasattr(group, m)] == []
    assert group.ranks == 1 and group.diagnose(RuntimeError("x")) is None  # one rank: its own traceback says it
