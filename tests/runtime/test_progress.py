"""Progress bars: none is made, nor tqdm.auto imported, when progress is off."""

import subprocess
import sys

# A fresh notebook kernel without ipywidgets, as tqdm.auto detects one; every warning shown.
NOTEBOOK = """
import sys, types, warnings
warnings.simplefilter("always")
shell = type("ZMQInteractiveShell", (), {})()
sys.modules["ipykernel.zmqshell"] = types.ModuleType("ipykernel.zmqshell")
ipython = types.ModuleType("IPython")
ipython.get_ipython = lambda: shell
sys.modules["IPython"] = ipython
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", NOTEBOOK + code], capture_output=True, text=True, timeout=300
    )


def test_fit_without_progress_in_a_notebook_without_ipywidgets_warns_nothing() -> None:
    done = _run(
        "import torch\n"
        "from repinterp import RepresentativeInterpreter\n"
        "from tests.networks import tiny_cnn\n"
        "ri = RepresentativeInterpreter(tiny_cnn().eval(), '3', n_boundaries=4, progress=False)\n"
        "ri.fit(torch.randn(12, 3, 16, 16))\n"
        "assert 'tqdm.autonotebook' not in sys.modules\n"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "IProgress" not in done.stderr


def test_the_notebook_check_is_real() -> None:
    """With progress on, tqdm.auto is imported and warns in that notebook (the check above
    can fail)."""
    done = _run("from repinterp.runtime.progress import progress_bar\nprogress_bar(total=1)\n")
    assert "IProgress not found" in done.stderr
