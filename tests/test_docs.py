"""Generated docs stay in sync with the code."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ops_doc_matches_registry():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_ops_doc.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
