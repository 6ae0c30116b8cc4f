"""Tensor-parallel LLM inference benchmark: eager, inductor, thunderfx and thunder.jit, on CPU or GPU.

A superset of upstream thunder's ``benchmark_inference.py`` command line, written for thunder-symbolic:
it runs on CPU (gloo) as well as CUDA (nccl), needs no model hub (a built-in small Llama-4 text config,
seeded random weights), and measures what symbolic values are for: with a KV cache that grows every
decode step, how often thunder recompiles under each ``--thunder-cache`` option.

    torchrun --nproc-per-node 2 thunder/benchmarks/benchmark_inference.py --mode thunder \\
        --thunder-cache "symbolic values"
    python thunder/benchmarks/benchmark_inference.py --mode thunder --compare-cache   # both caches
    torchrun --nproc-per-node 2 thunder/benchmarks/benchmark_inference.py --compare-modes eager,inductor,thunder

Rank 0 prints the report; ``--save-results --output-dir DIR`` writes it as JSON. Any rank's failure
ends the run with a non-zero exit status (torchrun stops the other ranks).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import os
import platform
import re
import resource
import statistics
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

CACHE_OPTIONS = ("constant values", "symbolic values")
MODES = ("eager", "inductor", "thunder", "thunderjit")
THUNDER_MODES = ("thunder", "thunderjit")
TINY_MODEL = "tiny-llama4"
MAVERICK = "meta-llama/Llama-4-Maverick-17B-128E"
CUDA_ONLY_FLAGS = ("enable_nvfp4", "enable_nv_linear", "enable_thunder_cudagraph", "profile")


# --- Command line ----------------------------------------------------------------------------------


def _int_at_least(minimum: int):
    """An argparse type: an int >= ``minimum`` (a size of 0 failed deep inside transformers)."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an int, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return convert


def _modes(text: str) -> list[str]:
    modes = [mode.strip() for mode in text.split(",")]
    unknown = [mode for mode in modes if mode not in MODES]
    if unknown or not modes:
        raise argparse.ArgumentTypeError(f"unknown mode {unknown[0]!r}: choose from {', '.join(MODES)}")
    if len(set(modes)) != len(modes):
        raise argparse.ArgumentTypeError(f"a mode is named twice in {text!r}")
    return modes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-name", default=None, help=f"hub id or '{TINY_MODEL}' (default: {TINY_MODEL} on CPU)")
    p.add_argument("--batch-size", type=_int_at_least(1), default=1)
    p.add_argument(
        "--input-length", type=_int_at_least(1), default=None, help="prompt length (default: 16 on CPU, 2048 on GPU)"
    )
    p.add_argument(
        "--output-length",
        type=_int_at_least(2),
        default=None,
        help="tokens generated, one prefill and at least one decode step (default: 9 CPU, 128 GPU)",
    )
    p.add_argument(
        "--num-iterations", type=_int_at_least(1), default=None, help="measured iterations (default: 3 CPU, 100 GPU)"
    )
    p.add_argument("--warmup-iterations", type=_int_at_least(0), default=None, help="(default: 1 on CPU, 10 on GPU)")
    p.add_argument("--num-layers", type=_int_at_least(1), default=2)
    p.add_argument("--hidden-size", type=_int_at_least(1), default=256, help=f"hidden size of {TINY_MODEL}")
    p.add_argument(
        "--mode",
        choices=MODES,
        default=None,
        help="default: eager, or thunder when --thunder-cache or --compare-cache is given",
    )
    p.add_argument(
        "--compare-modes",
        type=_modes,
        default=None,
        metavar="MODES",
        help="comma-separated modes run in one launch, compared in one table (e.g. eager,inductor,thunder); "
        "thunder modes run every cache option unless --thunder-cache picks one",
    )
    p.add_argument("--thunder-cache", choices=CACHE_OPTIONS, default=None, help="thunder's cache= option")
    p.add_argument("--compare-cache", action="store_true", help="run every cache option and compare them")
    p.add_argument("--kv-cache", choices=("dynamic", "static", "hybrid"), default="dynamic")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    p.add_argument("--attn-implementation", default=None, help="transformers attn_implementation (default: sdpa)")
    p.add_argument(
        "--disable-moe-replacement",
        action="store_true",
        help="keep transformers' Llama4TextMoe (default: grouped-matmul experts, tensor-parallel)",
    )
    p.add_argument(
        "--enable-torch-compile-executor",
        action="store_true",
        help="thunder modes fuse operations with thunder's torch.compile executor (Inductor)",
    )
    p.add_argument(
        "--background-load",
        type=_int_at_least(0),
        default=0,
        metavar="N",
        help="N processes that keep a core busy each for the whole launch (one set per host), so that a comparison "
        "on a busy machine can be repeated (default: 0)",
    )
    p.add_argument("--thunder-trace", action="store_true", help="print the last thunder traces")
    p.add_argument("--save-results", action="store_true")
    p.add_argument("--output-dir", default="./results")
    p.add_argument("--seed", type=int, default=0)
    for flag in CUDA_ONLY_FLAGS:
        p.add_argument(f"--{flag.replace('_', '-')}", action="store_true", help="CUDA only")
    args = p.parse_args(argv)
    thunder_options = [
        flag
        for flag, given in (
            ("--thunder-cache", args.thunder_cache),
            ("--compare-cache", args.compare_cache),
            ("--enable-torch-compile-executor", args.enable_torch_compile_executor),
        )
        if given
    ]
    if args.compare_cache and args.thunder_cache:
        p.error("--compare-cache runs every cache option; do not also give --thunder-cache")
    if args.compare_modes is not None:
        if args.mode is not None:
            p.error("--compare-modes runs the modes it names; do not also give --mode")
        if args.compare_cache:
            p.error("--compare-modes runs every cache option of its thunder modes (--thunder-cache picks one)")
        if thunder_options and not set(args.compare_modes) & set(THUNDER_MODES):
            p.error(f"{thunder_options[0]} applies to the thunder modes, and --compare-modes names none")
        args.mode = "+".join(args.compare_modes)
        caches = (args.thunder_cache,) if args.thunder_cache else CACHE_OPTIONS
        args.runs = [(m, c) for m in args.compare_modes for c in (caches if m in THUNDER_MODES else (None,))]
        return args
    if args.mode is None:
        args.mode = "thunder" if thunder_options else "eager"
    elif thunder_options and args.mode not in THUNDER_MODES:
        p.error(f"{thunder_options[0]} applies to --mode thunder or --mode thunderjit, not --mode {args.mode}")
    args.runs = [(args.mode, cache) for cache in (CACHE_OPTIONS if args.compare_cache else (args.thunder_cache,))]
    return args


def resolve_defaults(args: argparse.Namespace, device: torch.device) -> argparse.Namespace:
    on_gpu = device.type == "cuda"
    defaults = {
        "model_name": MAVERICK if on_gpu else TINY_MODEL,
        "input_length": 2048 if on_gpu else 16,
        "output_length": 128 if on_gpu else 9,
        "num_iterations": 100 if on_gpu else 3,
        "warmup_iterations": 10 if on_gpu else 1,
    }
    args = copy.copy(args)
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if not on_gpu:
        for flag in CUDA_ONLY_FLAGS:
            if getattr(args, flag):
                warnings.warn(f"--{flag.replace('_', '-')} needs CUDA; ignored on {device.type}")
                setattr(args, flag, False)
    return args


def unsupported(args, world_size: int) -> str | None:
    """Combinations that fail in lightning-thunder 0.2.6 itself (with either cache option), said up front."""
    if args.enable_nvfp4:
        return "--enable-nvfp4 (NVFP4 quantization of linear layers) is not implemented by this benchmark"
    if all(mode != "thunderjit" for mode, _ in args.runs):
        return None
    if world_size > 1:
        return (
            "--mode thunderjit with tensor parallelism fails in lightning-thunder 0.2.6's DTensor support "
            "(sharding propagation of the row-parallel matmul sees a doubled global shape); use --mode thunder"
        )
    if args.kv_cache == "dynamic":
        return (
            "--mode thunderjit cannot run transformers' DynamicCache on lightning-thunder 0.2.6 (the traced "
            "program indexes a cache layer that is still empty); use --kv-cache static or --mode thunder"
        )
    return None


# --- Distributed set-up ----------------------------------------------------------------------------


@dataclass
class Dist:
    rank: int = 0
    world_size: int = 1
    mesh: Any = None


def setup_distributed(device_type: str) -> Dist:
    """A 1-D tensor-parallel mesh when launched by torchrun (gloo on CPU, nccl on CUDA), else one process."""
    if not dist.is_torchelastic_launched():
        return Dist()
    from torch.distributed.device_mesh import init_device_mesh

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if device_type == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    mesh = init_device_mesh(device_type, (world_size,), mesh_dim_names=("tp",))
    return Dist(rank, world_size, mesh)


def pick_device(choice: str) -> torch.device:
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda was asked for, but CUDA is not available")
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- Model -----------------------------------------------------------------------------------------


def tiny_llama4_config(args):
    """A small Llama-4 text model shaped like Maverick: dense and MoE layers alternate."""
    from transformers import Llama4TextConfig

    heads = 4 * max(1, args.hidden_size // 256)
    return Llama4TextConfig(
        hidden_size=args.hidden_size,
        intermediate_size=args.hidden_size,
        intermediate_size_mlp=2 * args.hidden_size,
        num_hidden_layers=args.num_layers,
        num_attention_heads=heads,
        num_key_value_heads=max(2, heads // 2),
        head_dim=args.hidden_size // heads,
        vocab_size=1024,
        num_local_experts=4,
        interleave_moe_layer_step=2,
    )


def load_config(args):
    if args.model_name == TINY_MODEL:
        return tiny_llama4_config(args)
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(args.model_name)
    except OSError as e:  # no hub and no local copy
        warnings.warn(f"cannot load the config of {args.model_name} ({e}); using {TINY_MODEL}")
        return tiny_llama4_config(args)
    config = getattr(config, "text_config", config)
    config.num_hidden_layers = args.num_layers
    return config


def tp_plan(config, *, grouped_experts: bool) -> dict:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    layers = "*.layers.*"
    plan = {
        f"{layers}.self_attn.q_proj": ColwiseParallel(use_local_output=True),
        f"{layers}.self_attn.k_proj": ColwiseParallel(use_local_output=True),
        f"{layers}.self_attn.v_proj": ColwiseParallel(use_local_output=True),
        f"{layers}.self_attn.o_proj": RowwiseParallel(use_local_output=True),
    }
    for mlp in ("feed_forward", "feed_forward.shared_expert"):
        plan[f"{layers}.{mlp}.gate_proj"] = ColwiseParallel(use_local_output=False)
        plan[f"{layers}.{mlp}.up_proj"] = ColwiseParallel(use_local_output=False)
        plan[f"{layers}.{mlp}.down_proj"] = RowwiseParallel(use_local_output=True)
    if grouped_experts:  # the routed experts of the MoE replacement, sharded over their intermediate dim
        from layers_for_inference_benchmark import GroupedLinearColwiseParallel, GroupedLinearRowwiseParallel

        experts = f"{layers}.feed_forward.routed_experts"
        plan[f"{experts}.gate_proj"] = GroupedLinearColwiseParallel()
        plan[f"{experts}.up_proj"] = GroupedLinearColwiseParallel()
        plan[f"{experts}.down_proj"] = GroupedLinearRowwiseParallel()
    return plan


@torch.no_grad()
def initialize(model, seed: int, device: torch.device) -> None:
    """Seeded random weights (the same on every rank), unit norms, and rotary frequencies recomputed."""
    from torch.distributed.tensor import DTensor

    generator = torch.Generator(device=device).manual_seed(seed)
    for name, param in model.named_parameters():
        local = param.to_local() if isinstance(param, DTensor) else param
        if "norm" in name:
            local.fill_(1.0)
        else:
            local.copy_(torch.randn(local.shape, generator=generator, device=device, dtype=torch.float32) * 0.02)
    for module in model.modules():
        if hasattr(module, "rope_init_fn") and hasattr(module, "inv_freq"):
            inv_freq, module.attention_scaling = module.rope_init_fn(module.config, device)
            module.inv_freq = inv_freq
            module.original_inv_freq = inv_freq


def build_model(args, config, ctx: Dist, device: torch.device):
    from transformers import AutoModelForCausalLM

    dtype = getattr(torch, args.dtype)
    if args.attn_implementation:
        config._attn_implementation = args.attn_implementation
    if config.num_attention_heads % ctx.world_size or config.num_key_value_heads % ctx.world_size:
        raise ValueError(
            f"{config.num_attention_heads} attention and {config.num_key_value_heads} KV heads cannot be split "
            f"over {ctx.world_size} ranks"
        )
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, torch_dtype=dtype)
        grouped_experts = not args.disable_moe_replacement
        if grouped_experts:
            from layers_for_inference_benchmark import replace_moe_layers

            replace_moe_layers(model)
    if ctx.mesh is not None:
        from torch.distributed.tensor.parallel import parallelize_module

        with warnings.catch_warnings():
            # The plan names the layers of dense and of MoE blocks; torch warns for every key a layer lacks.
            warnings.filterwarnings("ignore", message="Parallelize plan key", category=UserWarning)
            model = parallelize_module(model, ctx.mesh, tp_plan(config, grouped_experts=grouped_experts))
    model.to_empty(device=device)
    initialize(model, args.seed, device)
    model.requires_grad_(False)
    model.eval()
    return model


def make_kv_cache(args, config, ctx: Dist, device: torch.device):
    from transformers import DynamicCache, HybridChunkedCache, StaticCache

    length = args.input_length + args.output_length
    common = dict(max_batch_size=args.batch_size, max_cache_len=length, device=device, dtype=getattr(torch, args.dtype))
    if args.kv_cache == "dynamic":
        return DynamicCache()
    if args.kv_cache == "static":
        return StaticCache(config=config, tp_size=ctx.world_size, **common)
    hybrid_config = copy.copy(config)  # Llama-4 has chunked attention; HybridCache expects a sliding window
    hybrid_config.sliding_window = getattr(config, "attention_chunk_size", length)
    return HybridChunkedCache(config=hybrid_config, tp_size=ctx.world_size, **common)


# --- Compilation and its accounting ----------------------------------------------------------------


def inductor_mode(args) -> str:
    """CUDA graphs ("reduce-overhead") on CUDA with a static KV cache, as upstream benchmarks Inductor. A dynamic
    cache holds the tensors that one step's graph returned and feeds them to the next step, whose replay can
    overwrite them (torch raises "accessing tensor output of CUDAGraphs that has been overwritten"), so it, and
    CPU, get Inductor's default mode."""
    return "reduce-overhead" if args.device_type == "cuda" and args.kv_cache == "static" else "default"


def compile_model(model, args, mode: str, cache: str | None):
    if mode == "eager":
        return model
    if mode == "inductor":
        return torch.compile(model, mode=inductor_mode(args))
    from thunder.dynamo import thunderfx

    import thunder

    options = {} if cache is None else {"cache": cache}
    # The table counts thunder's compiles: past thunder-symbolic's recompile limit (8) a call would run eagerly.
    options["recompile_limit"] = sys.maxsize
    if args.enable_nv_linear:
        options.update(nv_enable_linear=True, nv_enable_matmul=True)
    if args.enable_thunder_cudagraph:
        from thunder.transforms.cudagraph import CUDAGraphTransform

        options["transforms"] = [CUDAGraphTransform()]
    executors = thunder.get_default_executors()
    if args.enable_torch_compile_executor:
        from thunder_symbolic.distributed.dtensor_local import with_torch_compile_executor

        executors = with_torch_compile_executor(executors)
    if mode == "thunder":
        return thunderfx(model, executors=executors, **options)
    # As upstream: transformers builds attention masks with torch.vmap, which thunder.jit cannot trace;
    # SDPAMaskTransform computes them with plain tensor operations.
    from thunder.recipes.hf_transformers import SDPAMaskTransform

    mask_transform = SDPAMaskTransform()
    transforms = [mask_transform, *options.pop("transforms", [])]
    options.update(transforms=transforms, executors=[mask_transform.get_executor(), *executors])
    return thunder.jit(model, **options)


def thunder_functions(compiled) -> list:
    """Every thunder-compiled function behind ``compiled`` (one for thunder.jit, one per split for thunderfx)."""
    backend = getattr(compiled, "_backend", None)
    if backend is not None:
        return [fn for info in backend.subgraph_infos for fn in info.thunder_compiled_fns]
    return [compiled] if hasattr(compiled, "_lc_cs") else []


def region_label(fn) -> str:
    """A thunder region by what it computes: its most frequent operations (of its last trace)."""
    import thunder

    names: dict[str, int] = {}
    for bsym in thunder.last_traces(fn)[-1].bound_symbols:
        name = bsym.sym.name
        if name not in ("unpack_trivial", "python_return", "shape", "python_del"):
            names[name] = names.get(name, 0) + 1
    common = sorted(names, key=lambda n: -names[n])[:3]
    label = f"{sum(names.values())} ops: " + ", ".join(common)
    fused = [b for b in thunder.last_traces(fn)[-1].bound_symbols if b.sym.is_fusion]
    if fused:
        kernels = sum(len(region.kernels()) for b in fused for region in _fused_regions(b))
        ops = sum(len(b.subsymbols) for b in fused)
        label += f"; {len(fused)} fused regions of {ops} ops ({kernels} Inductor kernels)"
    return label


def _fused_regions(bsym) -> list:
    """The fused regions (thunder_symbolic's Inductor regions) a fusion bound symbol calls."""
    from thunder_symbolic.fusion.inductor_regions import InductorRegion

    calls = [getattr(fn, "__wrapped__", fn) for fn in bsym._call_ctx.values()] if bsym._call_ctx else []
    return [fn for fn in calls if isinstance(fn, InductorRegion)]


def dynamo_graphs(compiled) -> int:
    backend = getattr(compiled, "_backend", None)
    if backend is not None:
        return len(backend.subgraph_infos)
    from torch._dynamo.utils import counters

    return int(counters["stats"].get("unique_graphs", 0))


def split_reasons(compiled) -> dict[str, int]:
    """Why thunderfx split the graphs, each distinct reason (node names and addresses left out) with how often
    it occurred: once per node (thunderfx records a node's reason each time split_module asks for its
    partition, twice in graphs with autocast or grad-mode nodes)."""
    backend = getattr(compiled, "_backend", None)
    reasons: dict[str, int] = {}
    for info in getattr(backend, "subgraph_infos", ()):
        for text in dict.fromkeys(f"{r.reason_type.name}: {r.info}" for r in info.split_reasons or ()):
            text = re.sub(r"node with name: \S+ and |node \S+ | at 0x[0-9a-f]+", "", text)
            reasons[text] = reasons.get(text, 0) + 1
    return dict(sorted(reasons.items(), key=lambda item: -item[1]))


@dataclass
class DecodeProfile:
    """Where a decode step's time goes under thunder: in its regions (their prologues, and the rest of a
    call: computation, epilogue, dispatch) and outside them (the operations thunderfx leaves to PyTorch,
    collectives between regions, sampling). Each region's calls are timed by a wrapper of its forward;
    the prologue's time is thunder's timestamp of the region's last call."""

    steps: int = 0
    step_s: float = 0.0
    regions_s: float = 0.0
    prologues_s: float = 0.0
    per_region_s: dict[int, list[float]] = field(default_factory=dict)  # index -> [call s, prologue s]
    _call_ns: dict[int, int] = field(default_factory=dict)  # id(region) -> time in its calls so far
    _labels: dict[int, str] = field(default_factory=dict)

    def restart(self) -> None:
        """Forget the steps so far: the warm-up's (a step may compile inside a region, as the torch.compile
        executor does for new sizes, without a thunder cache miss)."""
        self.steps, self.step_s, self.regions_s, self.prologues_s = 0, 0.0, 0.0, 0.0
        self.per_region_s.clear()

    def instrument(self, compiled) -> dict[int, int]:
        """Time every region's calls (once per region); returns the time in each region's calls so far."""
        for fn in thunder_functions(compiled):
            if id(fn) not in self._call_ns and hasattr(fn, "_forward_fn"):
                self._call_ns[id(fn)] = 0
                fn._forward_fn = self._timed(fn._forward_fn, id(fn))
        return dict(self._call_ns)

    def _timed(self, forward, key: int):
        def timed(*args, **kwargs):
            start = time.perf_counter_ns()
            try:
                return forward(*args, **kwargs)
            finally:
                self._call_ns[key] += time.perf_counter_ns() - start

        return timed

    def add(self, seconds: float, compiled, timed_before: dict[int, int], calls_before, calls_after) -> None:
        import thunder

        fns = thunder_functions(compiled)
        if not self.steps:
            self._labels = {i: region_label(fn) for i, fn in enumerate(fns)}
        self.steps += 1
        self.step_s += seconds
        for index, fn in enumerate(fns):
            if calls_after.get(id(fn), 0) == calls_before.get(id(fn), 0):
                continue
            call = (self._call_ns.get(id(fn), 0) - timed_before.get(id(fn), 0)) / 1e9
            cs = thunder.compile_stats(fn)
            prologue = (cs.last_prologue_execution_stop - cs.last_prologue_execution_start) / 1e9
            self.regions_s += call
            self.prologues_s += prologue
            totals = self.per_region_s.setdefault(index, [0.0, 0.0])
            totals[0] += call
            totals[1] += prologue

    def summary(self, top: int = 5) -> dict[str, Any] | None:
        if not self.steps:
            return None

        def ms(seconds: float) -> float:
            return 1e3 * seconds / self.steps

        ranked = sorted(self.per_region_s.items(), key=lambda item: -item[1][0])[:top]
        return {
            "steps": self.steps,
            "step_ms": ms(self.step_s),
            "thunder_regions_ms": ms(self.regions_s),
            "thunder_prologues_ms": ms(self.prologues_s),
            "outside_thunder_ms": ms(self.step_s - self.regions_s),
            "top_regions": [
                {"region": self._labels.get(index, str(index)), "ms": ms(call), "prologue_ms": ms(prologue)}
                for index, (call, prologue) in ranked
            ],
        }


@dataclass
class CompileCounter:
    """Counts thunder compiles per generation phase; a recompile is any compile after a function's first."""

    misses: dict[int, int] = field(default_factory=dict)
    recompiles: dict[str, int] = field(default_factory=lambda: {"prefill": 0, "first_decode": 0, "later_decode": 0})
    compile_time_s: float = 0.0
    compiling_calls: int = 0
    regions_called: dict[str, int] = field(default_factory=dict)  # thunder programs run by a step, per phase
    profile: DecodeProfile = field(default_factory=DecodeProfile)
    first_compile: dict[str, float] | None = None  # thunder's compiling in the first step that compiled, by phase

    def snapshot(self, compiled) -> tuple[dict[int, int], int, dict[int, int]]:
        import thunder

        fns = thunder_functions(compiled)
        calls = {id(fn): thunder.cache_hits(fn) + thunder.cache_misses(fn) for fn in fns}
        return {id(fn): thunder.cache_misses(fn) for fn in fns}, dynamo_graphs(compiled), calls

    def account(self, phase: str, before, after, seconds: float, compiled=None, timed_before=None) -> None:
        (misses_before, graphs_before, calls_before), (misses_after, graphs_after, calls_after) = before, after
        self.regions_called[phase] = sum(calls_after.values()) - sum(calls_before.values())
        if phase == "later_decode" and misses_after == misses_before and timed_before is not None:
            self.profile.add(seconds, compiled, timed_before, calls_before, calls_after)
        recompiles = sum(max(m, 1) - max(misses_before.get(k, 0), 1) for k, m in misses_after.items())
        self.recompiles[phase] += recompiles
        if misses_after != misses_before or graphs_after != graphs_before:
            if not self.compiling_calls and compiled is not None:
                self.first_compile = compile_phases(compiled, misses_before, calls_before, calls_after)
            self.compile_time_s += seconds
            self.compiling_calls += 1
        self.misses = misses_after


def compile_phases(compiled, misses_before, calls_before, calls_after) -> dict[str, float] | None:
    """Seconds thunder compiled in one step, by phase, from its timestamps of each region's last call: tracing
    (the interpreter, to the computation trace) and transforms (the prologue's and the computation's for
    execution, their Python). None when a region that compiled was called again in the step (the timestamps
    are then the later call's); no thunder region: zeros."""
    import thunder

    tracing = transforms = 0.0
    for fn in thunder_functions(compiled):
        misses = thunder.cache_misses(fn) - misses_before.get(id(fn), 0)
        if not misses:
            continue
        if misses != 1 or calls_after[id(fn)] - calls_before.get(id(fn), 0) != 1:
            return None
        cs = thunder.compile_stats(fn)
        tracing += (cs.last_trace_tracing_stop - cs.last_trace_tracing_start) / 1e9
        transforms += (cs.last_prologue_execution_start - cs.last_trace_tracing_stop) / 1e9
    return {"thunder_tracing_s": tracing, "thunder_transforms_s": transforms}


# --- Generation ------------------------------------------------------------------------------------


class StepTime(NamedTuple):
    """Seconds of a generation step: wall time, CPU time of this rank's main thread, which leaves out the
    waits for other ranks (collectives) and for the device, and CPU time of the rank's whole process, which
    adds its other threads' (gloo's communication threads: they compete with the main thread for the CPU)."""

    wall: float
    cpu: float
    process: float


class Runner:
    def __init__(self, args, config, ctx: Dist, device: torch.device, mode: str, cache: str | None):
        self.args, self.config, self.ctx, self.device = args, config, ctx, device
        self.model = build_model(args, config, ctx, device)
        self.vocab_size = self.model.config.vocab_size
        self.compiled = compile_model(self.model, args, mode, cache)
        self.counter = CompileCounter()

    def step(self, input_ids, kv_cache, phase: str, model=None) -> tuple[torch.Tensor, torch.Tensor, StepTime]:
        """One forward and the next token, and the time they took: the benchmark's own accounting of compiles
        and regions around them (thunder's only) is not timed."""
        before = self.counter.snapshot(self.compiled)
        timed_before = None if model else self.counter.profile.instrument(self.compiled)
        began, cpu_began, process_began = time.perf_counter(), time.thread_time(), time.process_time()
        start = kv_cache.get_seq_length()
        start = int(start) if isinstance(start, torch.Tensor) else start
        cache_position = torch.arange(start, start + input_ids.shape[1], device=self.device)
        with torch.no_grad():
            logits = (model or self.compiled)(
                input_ids, cache_position=cache_position, past_key_values=kv_cache, use_cache=True
            ).logits
        next_token = torch.argmax(logits[:, -1, :], dim=-1, keepdim=True)
        sync(self.device)
        took = StepTime(
            time.perf_counter() - began, time.thread_time() - cpu_began, time.process_time() - process_began
        )
        after = self.counter.snapshot(self.compiled)
        self.counter.account(phase, before, after, took.wall, self.compiled, timed_before)
        return next_token, logits[:, -1, :].float(), took

    def generate(self, progress=None, model=None, forced: torch.Tensor | None = None) -> dict[str, Any]:
        """Prefill then decode; ``forced`` (tokens) replaces the model's own choices (teacher forcing)."""
        generator = torch.Generator().manual_seed(self.args.seed)
        input_ids = torch.randint(
            0, self.vocab_size, (self.args.batch_size, self.args.input_length), generator=generator
        )
        input_ids = input_ids.to(self.device)
        kv_cache = make_kv_cache(self.args, self.config, self.ctx, self.device)
        sync(self.device)
        token, last_logits, prefill = self.step(input_ids, kv_cache, "prefill", model)
        tokens, logits, decode = [token], [last_logits], StepTime(0.0, 0.0, 0.0)
        for i in range(self.args.output_length - 1):
            if forced is not None:
                token = forced[:, i : i + 1]
            token, last_logits, took = self.step(token, kv_cache, "first_decode" if i == 0 else "later_decode", model)
            tokens.append(token)
            logits.append(last_logits)
            decode = StepTime(*(total + part for total, part in zip(decode, took)))
            if progress is not None:
                progress.update(1)
        return {
            "prefill_s": prefill.wall,
            "decode_s": decode.wall,
            "decode_cpu_s": decode.cpu,
            "decode_process_cpu_s": decode.process,
            "tokens": torch.cat(tokens, dim=1),
            "logits": logits,
        }


def summarize(args, iterations: list[dict[str, float]]) -> dict[str, Any]:
    b, n_in, n_out = args.batch_size, args.input_length, args.output_length
    prefill = [it["prefill_s"] * 1e3 for it in iterations]
    decode = [it["decode_s"] * 1e3 for it in iterations]
    total = [p + d for p, d in zip(prefill, decode)]
    tbot = [d / (n_out - 1) for d in decode]
    tbot_cpu = [it["decode_cpu_s"] * 1e3 / (n_out - 1) for it in iterations]
    tbot_process_cpu = [it["decode_process_cpu_s"] * 1e3 / (n_out - 1) for it in iterations]

    def spread(values):
        return statistics.stdev(values) if len(values) > 1 else 0.0

    return {
        "throughput_tokens_per_s": b * n_out / (statistics.mean(total) / 1e3),
        "prefill_throughput_tokens_per_s": b * n_in / (statistics.mean(prefill) / 1e3),
        "decode_throughput_tokens_per_s": b * (n_out - 1) / (statistics.mean(decode) / 1e3),
        "latency_ms_per_token": statistics.mean(total) / n_out,
        "ttft_ms": statistics.mean(prefill),
        "ttft_std_ms": spread(prefill),
        "tbot_ms": statistics.mean(tbot),
        "tbot_cpu_ms": statistics.mean(tbot_cpu),
        "tbot_process_cpu_ms": statistics.mean(tbot_process_cpu),
        "prefill_time_ms": statistics.mean(prefill),
        "decode_time_ms": statistics.mean(decode),
        "total_time_ms": statistics.mean(total),
        "total_time_std_ms": spread(total),
        "per_iteration_total_ms": total,
    }


def slowest_rank(value: float) -> float:
    """The largest of every rank's ``value``: a rank waits at each collective for the slowest one, so its
    CPU time against rank 0's tells a rank that computes longer from the collectives' own latency."""
    if not (dist.is_available() and dist.is_initialized()):
        return value
    values = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return max(values)


def memory_stats(device: torch.device) -> dict[str, float]:
    if device.type == "cuda":
        return {
            "current_memory_gb": torch.cuda.memory_allocated(device) / 2**30,
            "peak_memory_gb": torch.cuda.max_memory_allocated(device) / 2**30,
        }
    return {"peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def start_compilers(args, config, ctx: Dist, device: torch.device) -> dict[str, Any]:
    """Pay the compilers' once-per-process start-up before any mode is timed, and return its seconds by part.

    The first mode to use a compiler would otherwise pay its start-up in its time to first token, which then
    depended on the modes' order (on 2 CPU cores, thunder's first token was 6.6 s run first and 3.0 s run after
    Inductor): Inductor's import and, on CPU, its probe of the vector instruction sets (a C++ build and a Python
    subprocess per set, 12-17 s); Dynamo's first capture of the model (the imports and caches its tracing of the
    model's code fills), with the eager backend, a generation long; and each mode's first compile, of a small
    module. A process that runs one mode pays its parts once, in its first token."""
    compiling = list(dict.fromkeys((mode, cache) for mode, cache in args.runs if mode != "eager"))
    through_dynamo = any(mode in ("inductor", "thunder") for mode, _ in compiling)
    start_up: dict[str, Any] = {}
    if through_dynamo or (compiling and args.enable_torch_compile_executor):  # thunderfx, that executor: Inductor
        began = time.perf_counter()
        from torch._inductor import compile_fx  # noqa: F401  (not `import torch._...`: that binds a local torch)

        if device.type == "cpu":
            from torch._inductor.cpu_vec_isa import pick_vec_isa

            pick_vec_isa()
        start_up["inductor_import_s"] = time.perf_counter() - began
    if through_dynamo:
        began = time.perf_counter()
        runner = Runner(args, config, ctx, device, "eager", None)
        runner.compiled = torch.compile(runner.model, backend="eager")
        runner.generate()
        start_up["dynamo_capture_s"] = time.perf_counter() - began
    small = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.SiLU()).to(device)
    start_up["first_compile_s"] = {}
    for mode, cache in compiling:
        torch._dynamo.reset()
        began = time.perf_counter()
        with torch.no_grad():
            compile_model(small, args, mode, cache)(torch.ones(2, 8, device=device))
        sync(device)
        start_up["first_compile_s"][run_name({"mode": mode, "thunder_cache": cache})] = time.perf_counter() - began
    torch._dynamo.reset()
    return start_up


def inductor_cache_use(counters) -> dict[str, int]:
    """Hits and misses of Inductor's on-disk FX-graph cache during one mode (the inductor mode's graphs, and
    thunderfx's regions left to PyTorch): once a machine has run a model, Inductor's first token measures
    loading its compiled graphs, while thunder compiles its programs in every process."""
    inductor = counters["inductor"]
    return {
        "inductor_cache_hits": inductor["fxgraph_cache_hit"],
        "inductor_cache_misses": inductor["fxgraph_cache_miss"] + inductor["fxgraph_cache_bypass"],
    }


def run_one(args, config, ctx: Dist, device: torch.device, mode: str, cache: str | None) -> dict[str, Any]:
    from torch._dynamo.utils import counters

    import thunder
    from thunder_symbolic.thunderfx import verdict_cache

    torch._dynamo.reset()  # each mode's compiles and graph counts are its own
    counters.clear()
    gc.collect()  # and its garbage collector does not scan the previous modes' leftovers
    runner = Runner(args, config, ctx, device, mode, cache)
    verdicts_before = verdict_cache.use()
    iterations = args.warmup_iterations + args.num_iterations
    progress = None
    if ctx.rank == 0:
        from tqdm import tqdm

        progress = tqdm(
            total=iterations * (args.output_length - 1),
            desc=f"{mode} {cache or ''}".strip(),
            unit="tok",
            file=sys.stderr,
            leave=False,
        )
    began = time.perf_counter()
    measured, first_iteration_s, first_token_s = [], None, None
    for i in range(iterations):
        if i == args.warmup_iterations:
            runner.counter.profile.restart()  # profile the measured iterations only
            if args.profile:
                torch.cuda.profiler.start()  # nsys/ncu capture only the measured iterations
        result = runner.generate(progress)
        if first_iteration_s is None:
            first_iteration_s = time.perf_counter() - began
            first_token_s = result["prefill_s"]  # compiling included
        if i >= args.warmup_iterations:
            measured.append(result)
    if args.profile:
        torch.cuda.profiler.stop()
    if progress is not None:
        progress.close()

    fns = thunder_functions(runner.compiled)
    misses = sum(thunder.cache_misses(fn) for fn in fns)
    compile_block = {
        "thunder_compiled_functions": len(fns),
        "thunder_cache_misses": misses,
        "thunder_cache_hits": sum(thunder.cache_hits(fn) for fn in fns),
        "recompiles_excluding_initial": sum(runner.counter.recompiles.values()),
        "recompiles_prefill": runner.counter.recompiles["prefill"],
        "recompiles_first_decode": runner.counter.recompiles["first_decode"],
        "recompiles_later_decode": runner.counter.recompiles["later_decode"],
        "dynamo_graphs": dynamo_graphs(runner.compiled) if mode in ("thunder", "inductor") else 0,
        "thunder_regions_per_decode_step": runner.counter.regions_called.get("later_decode", 0),
        "small_sums_over_ranks": small_sums_over_ranks() if fns else None,
        "decode_step_profile": runner.counter.profile.summary() if fns else None,
        "split_reasons": split_reasons(runner.compiled),
        "first_token_s": first_token_s,
        "first_compile_thunder": runner.counter.first_compile,
        "compiling_calls": runner.counter.compiling_calls,
        "compile_time_s": runner.counter.compile_time_s,
        "first_iteration_s": first_iteration_s,
        **inductor_cache_use(counters),
        # thunderfx's verdicts (which node kinds thunder runs) read from, and kept in, its cache across processes
        **{f"thunderfx_verdicts_{k}": n - verdicts_before[k] for k, n in verdict_cache.use().items()},
    }
    # The compiled model must compute what the eager model computes: same weights, same prompt, and the
    # eager model's tokens fed to both (bf16 near-ties would otherwise make greedy choices diverge).
    reference = runner.generate(model=runner.model)
    checked = runner.generate(forced=reference["tokens"])
    max_logit_diff = max((a - b).abs().max().item() for a, b in zip(checked["logits"], reference["logits"]))
    tolerance = 1e-3 if args.dtype == "float32" else 5e-2
    if args.thunder_trace and ctx.rank == 0:
        for fn in fns:
            print(thunder.last_traces(fn)[-1])
    verify = {"max_logit_diff_vs_eager": max_logit_diff, "matches_eager": max_logit_diff <= tolerance}
    metrics = summarize(args, measured)
    metrics["tbot_cpu_slowest_rank_ms"] = slowest_rank(metrics["tbot_cpu_ms"])
    from layers_for_inference_benchmark import Llama4MoE

    return {
        "mode": mode,
        "thunder_cache": cache,
        "inductor_mode": inductor_mode(args) if mode == "inductor" else None,
        "grouped_expert_moe_blocks": sum(isinstance(m, Llama4MoE) for m in runner.model.modules()),
        "verify": verify,
        "metrics": metrics,
        "memory": memory_stats(device),
        "compile": compile_block,
    }


def small_sums_over_ranks() -> str | None:
    """How thunder's programs summed small CPU tensors over gloo ranks (thunder_symbolic's DTensor local
    executor): through shared memory (ranks of one host) or gloo's all-gather; None where none was made."""
    try:
        from thunder_symbolic.distributed import shared_sums
    except ImportError:
        return None
    shared = shared_sums.connections().values()
    if not shared:
        return None
    return "shared memory" if all(shared) else "gloo all-gather" if not any(shared) else "shared memory and gloo"


# --- Report ----------------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("thunder", "transformers", "thunder_symbolic"):
        with contextlib.suppress(ImportError):
            out[name] = getattr(__import__(name), "__version__", "?")
    with contextlib.suppress(ImportError):
        import thunder_symbolic

        out["thunder_symbolic_active"] = str(thunder_symbolic.is_active())
    return out


MOE_KIND = {False: "grouped experts", True: "transformers"}  # by --disable-moe-replacement


def run_name(run: dict[str, Any]) -> str:
    return f"{run['mode']} ({run['thunder_cache'] or 'default cache'})" if run["mode"] in THUNDER_MODES else run["mode"]


def comparison(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per run: TBOT and its ratio to eager's and inductor's (when run), the main thread's and the
    process's CPU time per token, time to first token with compiling (and whether Inductor's on-disk cache
    served it), recompiles and thunder regions per decode step."""
    tbot = {run["mode"]: run["metrics"]["tbot_ms"] for run in runs if run["mode"] in ("eager", "inductor")}
    rows = []
    for run in runs:
        m, c = run["metrics"], run["compile"]
        rows.append(
            {
                "run": run_name(run),
                "tbot_ms": m["tbot_ms"],
                "tbot_vs_eager": m["tbot_ms"] / tbot["eager"] if "eager" in tbot else None,
                "tbot_vs_inductor": m["tbot_ms"] / tbot["inductor"] if "inductor" in tbot else None,
                "tbot_cpu_ms": m["tbot_cpu_ms"],
                "tbot_cpu_slowest_rank_ms": m["tbot_cpu_slowest_rank_ms"],
                "tbot_process_cpu_ms": m["tbot_process_cpu_ms"],
                "decode_tokens_per_s": m["decode_throughput_tokens_per_s"],
                "first_token_s": c["first_token_s"],
                "compile_time_s": c["compile_time_s"],
                "inductor_cache_hits": c["inductor_cache_hits"],
                "inductor_cache_misses": c["inductor_cache_misses"],
                "recompiles_later_decode": c["recompiles_later_decode"],
                "thunder_regions_per_decode_step": c["thunder_regions_per_decode_step"],
                "matches_eager": run["verify"]["matches_eager"],
            }
        )
    return rows


def print_start_up(start_up: dict[str, Any]) -> None:
    parts = []
    if "inductor_import_s" in start_up:
        parts.append(f"Inductor's import and vector-ISA probe {start_up['inductor_import_s']:.1f} s")
    if "dynamo_capture_s" in start_up:
        parts.append(f"Dynamo's first capture of the model {start_up['dynamo_capture_s']:.1f} s")
    if start_up["first_compile_s"]:
        firsts = ", ".join(f"{name} {s:.1f} s" for name, s in start_up["first_compile_s"].items())
        parts.append(f"a first compile of a small module: {firsts}")
    if parts:
        print("start-up, paid once before any mode is timed: " + "; ".join(parts))


def print_report(report: dict[str, Any]) -> None:
    cfg = report["config"]
    print(
        f"\n=== {cfg['mode']} | {cfg['model_name']} | {cfg['world_size']} rank(s) on {cfg['device']} | "
        f"batch {cfg['batch_size']}, input {cfg['input_length']}, output {cfg['output_length']}, "
        f"KV cache {cfg['kv_cache']}, MoE {MOE_KIND[cfg['disable_moe_replacement']]}"
        + (f", background load: {cfg['background_load']} busy processes" if cfg.get("background_load") else "")
        + " ==="
    )
    print_start_up(report["start_up"])
    for run in report["runs"]:
        m, c, mem = run["metrics"], run["compile"], run["memory"]
        v = run["verify"]
        cache = f"; thunder cache: {run['thunder_cache'] or 'default'}" if run["mode"] in THUNDER_MODES else ""
        if run["mode"] == "inductor":
            cache = f"; torch.compile mode: {run['inductor_mode']}"
        print(
            f"\n-- {run['mode']}{cache}; matches eager: {v['matches_eager']} "
            f"(max logit difference {v['max_logit_diff_vs_eager']:.2e})"
        )
        print(
            f"  throughput {m['throughput_tokens_per_s']:.1f} tok/s (prefill {m['prefill_throughput_tokens_per_s']:.1f},"
            f" decode {m['decode_throughput_tokens_per_s']:.1f})"
        )
        print(
            f"  latency {m['latency_ms_per_token']:.2f} ms/token, TTFT {m['ttft_ms']:.2f} ms "
            f"(std {m['ttft_std_ms']:.2f}), TBOT {m['tbot_ms']:.2f} ms (CPU {m['tbot_cpu_ms']:.2f} ms, the slowest "
            f"rank's {m['tbot_cpu_slowest_rank_ms']:.2f} ms; the process's {m['tbot_process_cpu_ms']:.2f} ms, its "
            "communication threads included)"
        )
        print(
            f"  prefill {m['prefill_time_ms']:.1f} ms, decode {m['decode_time_ms']:.1f} ms, total "
            f"{m['total_time_ms']:.1f} ms (std {m['total_time_std_ms']:.1f})"
        )
        print("  memory " + ", ".join(f"{k} {v:.2f}" for k, v in mem.items()))
        if run["mode"] == "eager":
            continue
        print(
            f"  compile: {c['thunder_compiled_functions']} thunder functions, {c['thunder_cache_misses']} misses,"
            f" {c['thunder_cache_hits']} hits, {c['dynamo_graphs']} dynamo graphs"
        )
        print(
            f"  recompiles excluding initial: {c['recompiles_excluding_initial']} (prefill "
            f"{c['recompiles_prefill']}, first decode {c['recompiles_first_decode']}, later decode "
            f"{c['recompiles_later_decode']})"
        )
        phases = c["first_compile_thunder"] if run["mode"] in THUNDER_MODES else None
        in_thunder = ""
        if phases:
            tracing, transforms = phases["thunder_tracing_s"], phases["thunder_transforms_s"]
            in_thunder = f" (thunder's tracing {tracing:.1f} s, its transforms {transforms:.1f} s)"
        print(
            f"  compiling: {c['compile_time_s']:.1f} s in {c['compiling_calls']} calls; first token "
            f"{c['first_token_s']:.1f} s{in_thunder}, first iteration {c['first_iteration_s']:.1f} s; Inductor's "
            f"FX-graph cache: {c['inductor_cache_hits']} hits, {c['inductor_cache_misses']} misses"
            + (
                f"; thunderfx's verdict cache: {c['thunderfx_verdicts_read']} read, {c['thunderfx_verdicts_kept']} kept"
                if run["mode"] == "thunder"
                else ""
            )
        )
        if run["mode"] in THUNDER_MODES:
            print(f"  thunder regions per decode step: {c['thunder_regions_per_decode_step']}")
            if c.get("small_sums_over_ranks"):
                print(f"  small sums over the ranks: {c['small_sums_over_ranks']}")
        profile = c.get("decode_step_profile")
        if profile:
            print(
                f"  decode step (mean of {profile['steps']}): {profile['step_ms']:.2f} ms = thunder regions "
                f"{profile['thunder_regions_ms']:.2f} ms (prologues {profile['thunder_prologues_ms']:.2f}) + "
                f"outside thunder {profile['outside_thunder_ms']:.2f} ms"
            )
            print("  costliest regions per step:")
            for r in profile["top_regions"]:
                print(f"    {r['ms']:6.2f} ms (prologue {r['prologue_ms']:.2f}): {r['region']}")
        if c["split_reasons"]:
            print("  graph splits:")
            for reason, count in c["split_reasons"].items():
                print(f"    {count:>3} x {reason}")
    if len(report["runs"]) > 1:
        print(
            "\n-- comparison (TBOT: time between output tokens; CPU: of rank 0's main thread per token, without"
            " waits for other ranks; slowest: the largest rank's; process: rank 0's process, all its threads;"
            " first token: compiling included)"
        )
        print(
            f"  {'run':34} {'TBOT ms':>8} {'x eager':>8} {'x inductor':>10} {'CPU ms':>7} {'slowest':>7} "
            f"{'process':>7} {'first token s':>13} {'recompiles (later decode)':>25} {'regions/step':>12} "
            f"{'matches':>7}"
        )
        for row in report["comparison"]:
            ratios = [f"{r:.2f}" if r is not None else "-" for r in (row["tbot_vs_eager"], row["tbot_vs_inductor"])]
            print(
                f"  {row['run']:34} {row['tbot_ms']:>8.2f} {ratios[0]:>8} {ratios[1]:>10} {row['tbot_cpu_ms']:>7.2f} "
                f"{row['tbot_cpu_slowest_rank_ms']:>7.2f} {row['tbot_process_cpu_ms']:>7.2f} "
                f"{row['first_token_s']:>13.1f} {row['recompiles_later_decode']:>25} "
                f"{row['thunder_regions_per_decode_step']:>12} {row['matches_eager']!s:>7}"
            )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; a torchrun rank then ends without Python's finalization (``rank_exit``)."""
    args = parse_args(argv)
    device = pick_device(args.device)
    args = resolve_defaults(args, device)
    args.device_type = device.type
    warnings.filterwarnings("ignore", message=".*symbolic values.*highly experimental")
    ctx = setup_distributed(device.type)
    from background_load import busy_processes

    try:
        with busy_processes(args.background_load if int(os.environ.get("LOCAL_RANK", 0)) == 0 else 0):
            code = run_modes(args, ctx, device)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if ctx.mesh is not None:  # a torchrun rank, one of one too: its gloo group outlives it (see rank_exit)
        from rank_exit import end_rank

        end_rank(code)
    return code


def run_modes(args, ctx: Dist, device: torch.device) -> int:
    try:
        reason = unsupported(args, ctx.world_size)
        if reason is not None:
            raise SystemExit(f"benchmark_inference.py: {reason}")
        torch.manual_seed(args.seed)
        config = load_config(args)
        start_up = start_compilers(args, config, ctx, device)
        runs = [run_one(args, config, ctx, device, mode, cache) for mode, cache in args.runs]
        report = {
            "config": {**{k: v for k, v in vars(args).items()}, "world_size": ctx.world_size, "device": str(device)},
            "versions": versions(),
            "start_up": start_up,
            "runs": runs,
            "comparison": comparison(runs),
        }
        if ctx.rank == 0:
            print_report(report)
            if args.save_results:
                os.makedirs(args.output_dir, exist_ok=True)
                path = os.path.join(args.output_dir, f"inference_{args.mode}_{args.kv_cache}_{int(time.time())}.json")
                with open(path, "w") as f:
                    json.dump(report, f, indent=2, default=str)
                print(f"\nresults written to {path}")
        return 0
    except Exception:
        print(f"[rank {ctx.rank}] benchmark failed:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
