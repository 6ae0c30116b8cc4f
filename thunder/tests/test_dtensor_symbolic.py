"""DTensor under symbolic values on 2 ranks (gloo on CPU): correct global and local shapes.

0.2.6 failed `DTensor.from_local` under symbolic values (a proxy without history), and once that was
tolerated returned the global size of the *first* call for every later one (8 where 16 is right).
"""

import pytest

from thunder_symbolic.testing import run_torchrun

FROM_LOCAL = """
import os, torch, thunder
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

mesh = init_device_mesh("cpu", (int(os.environ["WORLD_SIZE"]),))

def f(x):
    d = DTensor.from_local(x, mesh, [Shard(0)])
    return d.to_local() * 2, d.shape[0], d.shape[1]

jf = thunder.jit(f, cache="symbolic values")
sizes = (4, 8, 6, 10)
for n in sizes:
    x = torch.randn(n, 3)
    (local, rows, cols), (expected_local, expected_rows, expected_cols) = jf(x), f(x)
    torch.testing.assert_close(local, expected_local)
    assert (rows, cols) == (expected_rows, expected_cols) == (n * dist.get_world_size(), 3), (rows, cols)
assert 1 <= thunder.cache_misses(jf) <= len(sizes)
print(f"rank {dist.get_rank()}: ok")
dist.destroy_process_group()
"""


@pytest.mark.distributed
def test_from_local_global_shape_follows_the_local_size():
    result = run_torchrun(FROM_LOCAL, nproc=2, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(line for line in result.stdout.splitlines() if line.startswith("rank")) == [
        "rank 0: ok",
        "rank 1: ok",
    ]
