"""volvox's architecture as a test: the import-linter contracts in pyproject.toml (each layer
imports only the layers below it; no import cycles between sibling modules at any depth)."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold(capsys):
    """`lint-imports` passes: a module importing upwards, or a cycle, names itself here."""
    cli = pytest.importorskip("importlinter.cli")
    status = cli.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    assert status == 0, capsys.readouterr().out
