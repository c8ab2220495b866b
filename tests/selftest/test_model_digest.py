"""A stale engine (issue 23): every cache key grows from the model digest, which covers the weights, the source of
the model's own classes and the module's non-parameter state (engines.artifacts.module_state). A plain attribute can
change what the export computes while the eager outputs stay equal; a warm cache then reused the old ONNX and passed.

Unit tests only (no engine built, the suite's plugins off): tools/mutation.sh runs them against the digest's mutants.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np
import pytest
import torch

from core.cache import ArtifactCache
from engines.artifacts import ModelBuild
from suite.config import parse_config, resolve

pytestmark = pytest.mark.selftest

TINY = {"factory": "tests.selftest.tiny_models:two_input_net", "outputs": ["out"],
        "inputs": [{"name": "image", "shape": [1, 8, 8]}, {"name": "extra", "shape": [3], "low": -1.0, "high": 1.0}]}


def _build(tmp_path, factory, name="m"):
    model = parse_config({"models": {name: {**TINY, "factory": factory}}}).models[name]
    return ModelBuild(name, resolve(factory, "factory"), model.inputs, model.outputs, ArtifactCache(tmp_path))


W = "tests.selftest.wrong_answer_models"


def test_a_plain_attribute_changes_the_model_digest_every_key_grows_from(tmp_path):
    """variant "v1" and "v2": the same weights, the same eager outputs, another export; the same factory twice, the
    same digest."""
    v1, v2, again = (_build(tmp_path, f"{W}:variant_{v}") for v in ("v1", "v2", "v1"))
    assert v1.model_digest() != v2.model_digest()
    assert v1.model_digest() == again.model_digest()
    assert v1.export_options == v2.export_options and v1._export_parts(v1.export_options)["model_digest"] == \
        v1.model_digest()


def test_module_state_is_the_same_in_every_process():
    """Sets, dicts, functions, enums and objects without a repr of their address: the digest of a warm cache must
    not change with PYTHONHASHSEED."""
    import os
    import subprocess
    import sys

    code = ("import enum, hashlib, json, torch\n"
            "from engines.artifacts import module_state\n"
            "class Cfg:\n    def __init__(self): self.names = {'b', 'a', 'c'}; self.d = {'x': 1, 2: 'y'}\n"
            "m = torch.nn.Sequential(torch.nn.Linear(2, 2)); m.cfg = Cfg(); m.act = torch.relu\n"
            "m.register_forward_hook(lambda mod, i, o: o)\n"
            "print(hashlib.sha256(json.dumps(module_state(m), sort_keys=True).encode()).hexdigest())\n")
    digests = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2", "3")}
    assert len(digests) == 1


def test_module_state_covers_attributes_tensors_and_forward_hooks():
    import torch

    from engines.artifacts import module_state

    def state(edit=None):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
        if edit:
            edit(m)
        return module_state(m)

    base = state()
    assert state() == base
    assert state(lambda m: setattr(m[0], "variant", "v2")) != base  # a submodule's plain attribute
    assert state(lambda m: setattr(m, "mask", torch.ones(2))) != state(lambda m: setattr(m, "mask", torch.zeros(2)))
    def hook(mod, i, o):
        return o * 2

    hooked = state(lambda m: m[1].register_forward_hook(hook))
    assert hooked != base and hooked == state(lambda m: m[1].register_forward_hook(hook))  # not by handle id
    assert state(lambda m: setattr(m[1], "inplace", True)) != base  # a torch module's attribute, not in a repr
    assert state(lambda m: m.register_full_backward_hook(lambda *a: None)) == base  # no forward changes

    class Config:
        def __init__(self, where, attention):
            self._name_or_path, self.attn_implementation = where, attention

    assert state(lambda m: setattr(m, "config", Config("/host/a/model", "sdpa"))) == \
        state(lambda m: setattr(m, "config", Config("/host/b/model", "sdpa")))  # where it was loaded from: not keyed
    assert state(lambda m: setattr(m, "name_or_path", "/host/a/model")) == base  # as transformers' models keep it
    assert state(lambda m: setattr(m, "config", Config("/a", "sdpa"))) != \
        state(lambda m: setattr(m, "config", Config("/a", "eager")))


def test_the_state_is_taken_as_the_factory_made_it(tmp_path):
    """A forward that updates an attribute (a call counter, a cache) does not move the key of a later export."""
    build = _build(tmp_path, f"{W}:stale_when_repeated")
    module = build.torch_module()
    module.repeats = 7  # what forwards on the reference leave
    assert build.model_digest() == _build(tmp_path, f"{W}:stale_when_repeated").model_digest()


# ---- every value module_state reads, exactly (tools/mutation.sh mutates module_state and _state_value) -----------


class _Bare(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class _Colour(enum.Enum):
    RED = 1


class _Slots:
    """An object without a __dict__: named by its type only."""

    __slots__ = ("x",)


class _Config:
    def __init__(self) -> None:
        self._name_or_path, self.attn, self.ratio, self.nested = "/host/a", "sdpa", float("nan"), [[[[1]]]]


class _A:
    def __init__(self, x: int) -> None:
        self.x = x


class _B(_A):
    pass


class _Hook:
    def __init__(self) -> None:
        self.levels = [[[1]]]

    def __call__(self, module: torch.nn.Module, inputs: Any, output: Any) -> Any:
        return output


def _pre_hook(module: torch.nn.Module, inputs: Any) -> None:
    return None


def _stateful() -> torch.nn.Module:
    m = _Bare()
    m.flag, m.count, m.name, m.nothing, m.ratio, m.inf = True, 3, "v2", None, 0.5, float("inf")
    m.mask, m.array = torch.tensor([1.0, 2.0]), np.arange(3, dtype=np.int16)
    m.dtype, m.device = torch.float16, torch.device("cpu")
    m.kept, m.maker = [torch.nn.ReLU()], _Config
    m.cfg, m.colour, m.slots = _Config(), _Colour.RED, _Slots()
    m.names, m.table, m.pair = {"b", "a", 3}, {"b": 1, 2: "y"}, (1, "a")
    m.objects = {_A(2), _B(1), (1, (2, (3, (4,))))}  # ordered by their sorted JSON: _B's {"attributes": {"x": 1}...
    m.keyed = {_B(1): [[[[1]]]], (1, (2, (3, (4,)))): 0}  # keys and values to depth 4
    m.mode = torch._C._onnx.TrainingMode.EVAL  # a pybind11 enum: no __dict__, its value by name
    loop: list[Any] = []
    loop.append(loop)
    m.loop, m.deep, m.name_or_path = loop, [[[[[1]]]]], "/host/a"
    m.inner = _Bare()
    m.inner.variant = "v1"
    m.register_forward_hook(_Hook())
    m.register_forward_pre_hook(_pre_hook)
    return m


def test_module_state_names_each_kind_of_value_the_same_way_every_time() -> None:
    """The whole state of a module with one value of each kind: scalars as they are, floats by repr, tensors and
    arrays by dtype, shape and the sha256 of their bytes, modules kept in a list by class and repr, functions and
    classes by qualified name, containers element by element down to depth 4, a cycle by its type, objects by their
    attributes (without where they were loaded from), hooks in order."""
    import hashlib

    from engines.artifacts import module_state

    here = __name__

    def obj(name: str) -> dict[str, str]:
        return {"object": name}

    def sha(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    assert module_state(_stateful()) == {
        "": {
            "_forward_hooks": [{"object": f"{here}._Hook", "attributes": {"levels": [[obj("builtins.list")]]}}],
            "_forward_pre_hooks": [{"callable": f"{here}._pre_hook"}],
            "array": {"tensor": "int16", "shape": [3], "sha256": sha(np.arange(3, dtype=np.int16).tobytes())},
            "cfg": {"object": f"{here}._Config", "attributes": {"attn": "sdpa", "nested": [[[obj("builtins.list")]]],
                                                                  "ratio": "nan"}},
            "colour": {"object": f"{here}._Colour", "attributes": {"__objclass__": {"callable": f"{here}._Colour"},
                                                                     "_name_": "RED", "_sort_order_": 0,
                                                                     "_value_": 1}},
            "count": 3, "deep": [[[[obj("builtins.list")]]]], "device": "cpu", "dtype": "torch.float16",
            "flag": True, "inf": "inf",
            "kept": [{"module": "torch.nn.modules.activation.ReLU", "repr": "ReLU()"}],
            "loop": [obj("builtins.list")], "maker": {"callable": f"{here}._Config"},
            "mask": {"tensor": "torch.float32", "shape": [2],
                     "sha256": sha(np.array([1.0, 2.0], dtype=np.float32).tobytes())},
            "name": "v2", "names": ["a", "b", 3], "nothing": None, "pair": [1, "a"], "ratio": "0.5",
            "slots": {"object": f"{here}._Slots"}, "table": {'"b"': 1, "2": "y"},
            "objects": [[1, [2, [3, obj("builtins.tuple")]]], {"object": f"{here}._B", "attributes": {"x": 1}},
                        {"object": f"{here}._A", "attributes": {"x": 2}}],
            "keyed": {f'{{"attributes": {{"x": 1}}, "object": "{here}._B"}}': [[[obj("builtins.list")]]],
                      '[1, [2, [3, {"object": "builtins.tuple"}]]]': 0},
            "mode": {"object": "torch._C._onnx.TrainingMode", "value": "TrainingMode.EVAL"},
        },
        "inner": {"_forward_hooks": [], "_forward_pre_hooks": [], "variant": "v1"},
    }


def test_the_digest_reads_the_layers_and_not_the_order_a_state_was_built_in(tmp_path) -> None:
    """The same weights in another layer (ReLU, Tanh: torch classes, whose source is not read) is another model; the
    same state built in another order is the same one."""
    import copy

    from engines.pytorch.backend import model_digest

    torch.manual_seed(0)
    linear = torch.nn.Linear(2, 2)
    relu, tanh = torch.nn.Sequential(linear, torch.nn.ReLU()), torch.nn.Sequential(copy.deepcopy(linear),
                                                                                    torch.nn.Tanh())
    assert relu.state_dict().keys() == tanh.state_dict().keys() and model_digest(relu) != model_digest(tanh)
    model = parse_config({"models": {"m": TINY}}).models["m"]

    def built(*keys: str) -> ModelBuild:
        def make() -> torch.nn.Module:
            m = _Bare()
            m.table = dict.fromkeys(keys, 1)
            return m
        return ModelBuild("m", make, model.inputs, model.outputs, ArtifactCache(tmp_path))

    assert built("a", "b").model_digest() == built("b", "a").model_digest() != built("a").model_digest()


def test_a_qualified_name_of_an_object_without_a_module_is_its_types() -> None:
    from engines.artifacts import _qualname

    assert _qualname(object()) == "?.object" and _qualname(_Config) == f"{__name__}._Config"
