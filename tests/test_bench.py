import torch

import sys

import pytest

from posenc.bench import peak_memory, peak_rss


def test_counts_a_known_allocation():
    assert peak_memory(lambda: torch.zeros(1024, 1024)) == 4 * 1024 * 1024


def test_counts_temporaries_alive_together_and_ignores_views():
    x = torch.ones(256, 256)  # exists before: not counted

    def fn():
        a = x * 2          # 256 KiB
        b = a + 1          # another 256 KiB while a is alive
        return (a.T, b.view(-1))  # views add nothing

    assert peak_memory(fn) == 2 * 256 * 256 * 4


def test_freed_temporaries_do_not_accumulate():
    def fn():
        for _ in range(10):
            torch.zeros(128, 128).sum()

    assert peak_memory(fn) < 2 * 128 * 128 * 4


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak_rss reads Linux's /proc")
def test_peak_rss_sees_a_temporary_allocation():
    """A 64 MiB temporary that is written and freed inside fn shows up (within the measure's batching);
    an allocation-free fn does not."""
    size = 64 * 2**20
    peak = peak_rss(lambda: torch.ones(size // 4).sum())
    assert size - 2 * 2**20 <= peak < size + 8 * 2**20  # page counts are updated in batches
    assert peak_rss(lambda: None) < 4 * 2**20
