import atexit
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))

# The persistent compile cache is on by default: tests use one of their own per session
# (inherited by the processes they start), never the user's; tests of the cache itself
# pass their own directories.
os.environ["AOTGRAD_CACHE_DIR"] = _CACHE_DIR = tempfile.mkdtemp(prefix="aotgrad-test-cache-")
os.environ.pop("AOTGRAD_CACHE", None)
atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)


import eager_compare
import pytest


@pytest.fixture(params=["static", "dynamic"])
def shapes(request):
    """Runs a test with static shapes, then with ``dynamic=True`` and inputs of two more
    sizes (see ``eager_compare.check``). Modules opt in with
    ``pytestmark = pytest.mark.usefixtures("shapes")``."""
    eager_compare.SHAPES["mode"] = request.param
    yield request.param
    eager_compare.SHAPES["mode"] = "static"


@pytest.fixture(params=["plain", "two_tensor"])
def tensor_types(request):
    """Runs a test on plain tensors, then with every factory-made input a ``TwoTensor``
    (see ``eager_compare.check``). Modules opt in with
    ``pytestmark = pytest.mark.usefixtures("tensor_types")``."""
    eager_compare.TENSOR_TYPES["mode"] = request.param
    yield request.param
    eager_compare.TENSOR_TYPES["mode"] = "plain"


#: test_core cases that still differ from eager when every input is a TwoTensor (strict
#: xfail: a fix shows up as an XPASS). Keyed by test name and a part of its parameter id.
TWO_TENSOR_KNOWN = {
    ("test_mutation_through_view_of_input", ""): "the joint trace of in-place ops on views of a "
    "non-leaf TwoTensor builds a TwoTensor whose inner tensors' storage offsets differ "
    "(functionalization runs above the subclass; torch runs it below); not strict: it passes "
    "after some other tests ran in the same process, so it depends on global state",
    ("test_output_aliases_intermediate", "view_under_no_grad"): "the detach()ed view comes back "
    "as a new wrapper, not sharing the intermediate's (outer, data-less) storage",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or callspec.params.get("tensor_types") != "two_tensor":
            continue
        for (name, part), why in TWO_TENSOR_KNOWN.items():
            if item.originalname == name and part in callspec.id:
                item.add_marker(pytest.mark.xfail(reason=why, strict="not strict" not in why))


@pytest.fixture(autouse=os.environ.get("AOTGRAD_CHECK_JOINT_ONE_PASS") == "1")
def joint_one_pass_checked(monkeypatch):
    """With ``AOTGRAD_CHECK_JOINT_ONE_PASS=1``, every joint traced in the analysis run is
    compared with the two-run path's (``joint_one_pass_check``): a difference fails the
    test that compiled it, whatever it expects."""
    import joint_one_pass_check
    from aotgrad.core import pipeline

    monkeypatch.setattr(pipeline, "analyze_tracing_joint", joint_one_pass_check.checking(pipeline.analyze_tracing_joint))
    start = len(joint_one_pass_check.MISMATCHES)
    yield
    found = joint_one_pass_check.MISMATCHES[start:]
    del joint_one_pass_check.MISMATCHES[start:]
    assert not found, found


def pytest_terminal_summary(terminalreporter):
    if os.environ.get("AOTGRAD_CHECK_JOINT_ONE_PASS") == "1":
        import joint_one_pass_check

        terminalreporter.write_line(f"joints traced in the analysis run, compared: {joint_one_pass_check.COMPARED[0]}")
