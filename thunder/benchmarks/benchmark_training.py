"""Training steps over changing sequence lengths: compiles and time per cache option, against eager.

A small causal decoder (embedding, RMSNorm, rotary embedding by halves, attention, MLP, cross-entropy)
trains for ``--steps`` steps whose sequence length cycles through ``--lengths``. For each cache option
the script prints the compiles, the time spent in calls that compiled, the median time of the other
steps (forward and backward), and the largest difference of the loss and the gradients from eager's.

    python thunder/benchmarks/benchmark_training.py [--lengths 16 24 32 40] [--steps 24] [--json]

With ``--tensor-parallel``, under ``torchrun --nproc-per-node 2`` (gloo on CPU, nccl on CUDA), the MLP
(column- then row-wise) and the output head (column-wise, logits gathered) are sharded over the ranks
with ``parallelize_module``; the model trains in grad mode as any module, and gradients are compared as
full tensors. Rank 0 prints.

    torchrun --nproc-per-node 2 thunder/benchmarks/benchmark_training.py --tensor-parallel
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings

import torch
from torch import nn

import thunder

from rank_exit import end_rank  # beside this file

DIM, HEADS, VOCAB = 64, 4, 128


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.norm1, self.norm2 = nn.RMSNorm(DIM), nn.RMSNorm(DIM)
        self.qkv, self.out = nn.Linear(DIM, 3 * DIM, bias=False), nn.Linear(DIM, DIM, bias=False)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))
        self.head = nn.Linear(DIM, VOCAB, bias=False)

    @staticmethod
    def rotate(x, cos, sin):
        half = x.shape[-1] // 2
        return torch.cat([x[..., :half] * cos - x[..., half:] * sin, x[..., half:] * cos + x[..., :half] * sin], -1)

    def forward(self, tokens, targets):
        batch, length = tokens.shape
        positions = torch.arange(length, device=tokens.device).float()
        freqs = torch.outer(positions, 1.0 / 10000 ** (torch.arange(0, DIM // HEADS, 2).float() / (DIM // HEADS)))
        x = self.embed(tokens)
        q, k, v = self.qkv(self.norm1(x)).view(batch, length, 3, HEADS, DIM // HEADS).permute(2, 0, 3, 1, 4)
        q, k = self.rotate(q, freqs.cos(), freqs.sin()), self.rotate(k, freqs.cos(), freqs.sin())
        scores = (q @ k.transpose(-1, -2)) / (DIM // HEADS) ** 0.5
        causal = torch.ones(length, length, dtype=torch.bool, device=tokens.device).tril()
        attended = (torch.softmax(scores.masked_fill(~causal, float("-inf")), -1) @ v).transpose(1, 2)
        x = x + self.out(attended.reshape(batch, length, DIM))
        x = x + self.mlp(self.norm2(x))
        return nn.functional.cross_entropy(self.head(x).flatten(0, 1), targets.flatten())


def train(model, run, batches, misses=lambda: 0):
    """Per step: (seconds, whether it compiled, loss, gradients) of forward and backward through ``run``."""
    steps = []
    for tokens, targets in batches:
        model.zero_grad(set_to_none=True)
        before = misses()
        start = time.perf_counter()
        loss = run(tokens, targets)
        loss.backward()
        seconds = time.perf_counter() - start
        steps.append((seconds, misses() > before, loss.detach(), [_full(p.grad) for p in model.parameters()]))
    return steps


def _full(grad: torch.Tensor) -> torch.Tensor:
    """A gradient as one tensor (a DTensor's gathered over the mesh)."""
    return grad.full_tensor() if hasattr(grad, "full_tensor") else grad.clone()


def tensor_parallel(model: Decoder) -> tuple[Decoder, torch.device]:
    """``model`` with its MLP and output head sharded over every rank of the launch, and the device used."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    plan = {
        "mlp.0": ColwiseParallel(),
        "mlp.2": RowwiseParallel(),
        "head": ColwiseParallel(output_layouts=Replicate()),
    }
    return parallelize_module(model.to(device), mesh, plan), device


def measure(args) -> dict:
    """Eager's figures and each cache option's."""
    torch.manual_seed(0)
    model, device = tensor_parallel(Decoder()) if args.tensor_parallel else (Decoder(), torch.device("cpu"))
    generator = torch.Generator().manual_seed(1)
    batches = []
    for step in range(args.steps):
        length = args.lengths[step % len(args.lengths)]
        tokens = torch.randint(0, VOCAB, (args.batch, length + 1), generator=generator).to(device)
        batches.append((tokens[:, :-1], tokens[:, 1:]))

    eager = train(model, model, batches)
    results = {"lengths": args.lengths, "steps": args.steps, "batch": args.batch}
    if args.tensor_parallel:
        import torch.distributed as dist

        results["tensor_parallel"] = {"ranks": dist.get_world_size(), "device": device.type}
    results["eager"] = {"step_ms": 1e3 * statistics.median(step[0] for step in eager)}
    for cache in ("constant values", "symbolic values"):
        # (thunder's compiles are counted: past thunder-symbolic's recompile limit a step would run eagerly)
        jmodel = thunder.jit(model, cache=cache, recompile_limit=max(8, len(args.lengths)))
        steps = train(model, jmodel, batches, lambda: thunder.cache_misses(jmodel))
        hits = [seconds for seconds, compiled, _, _ in steps if not compiled]
        results[cache] = {
            "compiles": thunder.cache_misses(jmodel),
            "compiling_s": sum(seconds for seconds, compiled, _, _ in steps if compiled),
            "step_ms": 1e3 * statistics.median(hits) if hits else float("nan"),
            "loss_diff": max((s[2] - e[2]).abs().item() for s, e in zip(steps, eager)),
            "grad_diff": max((g - r).abs().max().item() for s, e in zip(steps, eager) for g, r in zip(s[3], e[3])),
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 24, 32, 40])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument(
        "--tensor-parallel",
        action="store_true",
        help="shard the MLP and the output head over the ranks of a torchrun launch (gloo on CPU, nccl on CUDA)",
    )
    args = parser.parse_args()
    if any(n < 2 for n in args.lengths) or args.steps < 1 or args.batch < 1:
        parser.error("--lengths must be >= 2, --steps and --batch >= 1")
    if args.tensor_parallel and "WORLD_SIZE" not in os.environ:
        parser.error("--tensor-parallel runs under torchrun: torchrun --nproc-per-node 2 " + __file__ + " ...")
    warnings.filterwarnings("ignore")
    results = measure(args)
    if args.tensor_parallel:
        import torch.distributed as dist

        rank = dist.get_rank()
        dist.destroy_process_group()
        if rank == 0:
            print_results(args, results)
        end_rank()
    print_results(args, results)


def print_results(args, results: dict) -> None:
    if args.json:
        print(json.dumps(results))
        return
    threads = torch.get_num_threads()
    parallel = results.get("tensor_parallel")
    layout = f", tensor-parallel over {parallel['ranks']} ranks ({parallel['device']})" if parallel else ""
    print(f"training {args.steps} steps, batch {args.batch}, lengths {args.lengths}{layout} (CPU threads: {threads})")
    print(f"  eager            step {results['eager']['step_ms']:8.2f} ms")
    for cache in ("constant values", "symbolic values"):
        r = results[cache]
        print(
            f"  {cache:16} step {r['step_ms']:8.2f} ms   compiles {r['compiles']:3d} ({r['compiling_s']:.1f} s)   "
            f"max diff to eager: loss {r['loss_diff']:.1e}, gradients {r['grad_diff']:.1e}"
        )


if __name__ == "__main__":
    main()
