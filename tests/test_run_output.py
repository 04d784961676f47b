"""A quiet, honest start (issue 52): dependencies' start-up noise is filtered where it arises, and the
web server's start-up keeps `/healthz` answering while its first workers warm up.

`scripts/run` itself (its "==>" lines, the serving line once /healthz answers) is measured by running it;
these check the pieces it relies on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from api.project import gunicorn_conf

ROOT = Path(__file__).resolve().parent.parent

# What a web or worker process does first: join the embedded PostgreSQL (pgserver asks platformdirs for a
# runtime folder as it is imported) and load the default embedding model (transformers' weight loading).
START = """
import kb.embedded.postgres
from kb.embedding import LocalMiniLMEmbedder
from kb.sentence_models import load_sentence_transformer

load_sentence_transformer(str(LocalMiniLMEmbedder().model_path()))
"""


def test_a_process_start_prints_no_runtime_dir_warning_and_no_loading_bar():
    env = {k: v for k, v in os.environ.items() if k not in {"XDG_RUNTIME_DIR", "PYTHONWARNINGS", "HF_HUB_DISABLE_PROGRESS_BARS"}}
    result = subprocess.run([sys.executable, "-c", START], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "RuntimeDirWarning" not in result.stderr and "Loading weights" not in result.stderr, result.stderr[-3000:]


def test_a_web_worker_warms_before_serving_only_while_a_sibling_is_warm():
    """A worker with a warm sibling warms before it accepts (the sibling serves meanwhile); one without
    (the server's start) warms while it answers /healthz. A sibling that exits, even killed, no longer counts."""
    sibling = 2**31 + 7  # no process has this pid
    assert not gunicorn_conf._a_sibling_is_warm()
    gunicorn_conf._set_warm(os.getpid(), True)
    assert not gunicorn_conf._a_sibling_is_warm()  # this worker itself is no sibling
    gunicorn_conf._set_warm(sibling, True)
    assert gunicorn_conf._a_sibling_is_warm()
    gunicorn_conf.child_exit(None, SimpleNamespace(pid=sibling))
    gunicorn_conf._set_warm(os.getpid(), False)
    assert not gunicorn_conf._a_sibling_is_warm()
