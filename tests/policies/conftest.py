import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def embedded_dir():
    """The converted embedded model (converted here on the first run on this machine)."""
    from cascade_envs.policies.embedded import embedded_model_path

    start = time.perf_counter()
    path = embedded_model_path()
    print(f"\nembedded_model_path(): {time.perf_counter() - start:.1f} s")
    return path


@pytest.fixture(scope="session")
def policy(embedded_dir):
    """One HFPolicy on the embedded model, shared by every test of this folder."""
    from cascade_envs.policies.hf import HFPolicy

    return HFPolicy(str(embedded_dir), device="cpu", max_batch_size=8)


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """One intra-op thread per test process: on the shared 2-core CI machine, torch's default
    thread pool spin-waits against the other workers and runs 5-10x slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
