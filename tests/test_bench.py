import torch

from posenc.bench import peak_memory


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
