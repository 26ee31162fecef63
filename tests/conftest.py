import os
import sys

sys.path.insert(0, os.path.dirname(__file__))


import eager_compare  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(params=["static", "dynamic"])
def shapes(request):
    """Runs a test with static shapes, then with ``dynamic=True`` and inputs of two more
    sizes (see ``eager_compare.check``). Modules opt in with
    ``pytestmark = pytest.mark.usefixtures("shapes")``."""
    eager_compare.SHAPES["mode"] = request.param
    yield request.param
    eager_compare.SHAPES["mode"] = "static"
