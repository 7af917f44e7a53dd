"""The type stubs (`python/stoker/_stoker.pyi`, what editors and type checkers read) name
exactly what the extension module has: every function and class, every public method
and property, and each function's parameters in order. A new function had been added
without its stub once already."""

import ast
import inspect
from pathlib import Path

import pytest

import stoker
from stoker import _stoker

STUB = Path(stoker.__file__).with_name("_stoker.pyi")


def _stub():
    return ast.parse(STUB.read_text())


def _public(names):
    return {n for n in names if not n.startswith("_")}


def _defs(body):
    return {node.name: node for node in body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}


def _params(fn: ast.FunctionDef):
    a = fn.args
    names = [p.arg for p in a.posonlyargs + a.args] + ([a.vararg.arg] if a.vararg else [])
    names += [p.arg for p in a.kwonlyargs] + ([a.kwarg.arg] if a.kwarg else [])
    return [n for n in names if n != "self"]


def test_the_module_has_what_the_stub_names_and_nothing_more():
    tree = _stub()
    stubbed = set(_defs(tree.body))
    stubbed |= {n.target.id for n in tree.body if isinstance(n, ast.AnnAssign)}
    runtime = _public(dir(_stoker)) | {"__version__", "_deliver_logs"}
    stubbed |= {"__version__"}
    assert _public(stubbed) == _public(runtime)
    assert "_deliver_logs" in stubbed
    assert set(stoker.__all__) <= runtime


@pytest.mark.parametrize(
    "name", [n for n, d in _defs(_stub().body).items() if isinstance(d, ast.FunctionDef)]
)
def test_each_function_takes_the_stubs_parameters(name):
    stub = _defs(_stub().body)[name]
    runtime = list(inspect.signature(getattr(_stoker, name)).parameters)
    assert _params(stub) == runtime


@pytest.mark.parametrize(
    "name", [n for n, d in _defs(_stub().body).items() if isinstance(d, ast.ClassDef)]
)
def test_each_class_has_the_stubs_methods_and_properties(name):
    cls = getattr(_stoker, name)
    stub = _defs(_defs(_stub().body)[name].body)
    own = set(vars(cls)) if cls.__module__ == "stoker" else set()
    missing = {m for m in stub if not hasattr(cls, m)}
    assert not missing, f"stubbed but not in {name}: {missing}"
    unstubbed = _public(own) - set(stub)
    assert not unstubbed, f"{name} has what the stub does not name: {unstubbed}"
    if isinstance(stub.get("__init__"), ast.FunctionDef):
        assert _params(stub["__init__"]) == list(inspect.signature(cls).parameters), name
    for method, fn in stub.items():
        attr = vars(cls).get(method)
        # Dunder methods are called by Python's protocols, positionally: names do not matter.
        if isinstance(fn, ast.FunctionDef) and callable(attr) and not method.startswith("__"):
            try:
                runtime = list(inspect.signature(attr).parameters)
            except (TypeError, ValueError):
                continue  # no text signature (a slot wrapper of object's)
            assert _params(fn) == [p for p in runtime if p != "self"], f"{name}.{method}"
