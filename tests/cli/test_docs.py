"""Generated docs and code stay in sync with their sources."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ops_doc_matches_registry():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_ops_doc.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_generated_codes_match_their_definition():
    """volvox/ops/codes.py is the one definition of the function and operator codes; the engine's
    codes.pxd and the shaders' const blocks are generated from it (tools/gen_codes.py)."""
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_codes.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
