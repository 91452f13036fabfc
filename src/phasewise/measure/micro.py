"""Microbenchmarks of the local device: the GEMM ceiling per format and memory bandwidth.

These are the roofs of the local roofline: a profile's MFU and MBU are taken against them,
and ``hardware_from_ceilings`` turns them into the ``HardwareSpec`` the cost model prices
the same steps on.
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

from phasewise.errors import InputError
from phasewise.measure.timing import clock_for, time_call
from phasewise.measure.types import Ceilings
from phasewise.specs import HardwareSpec

# Square GEMM sides. On a Zen 4 core fp32 matmul reaches its plateau by n = 1024 (within 5%
# of n = 2048 and 3072); 2048 costs ~0.2 s a repeat in fp32 on one core. A GPU needs
# n = 8192 to fill every SM with full tiles.
CPU_GEMM_SIZE = 2048
CUDA_GEMM_SIZE = 8192
# Bandwidth buffers, far past the last-level cache (CPUs: tens of MB; H100/H200 L2: 50-60 MB).
CPU_BUFFER_BYTES = 256 * 2**20
CUDA_BUFFER_BYTES = 2 * 2**30
# Formats measured by default. fp16 is left out on CPUs: without AVX512-FP16 torch runs
# fp16 matmul through a slow scalar path, which is no ceiling of anything.
CPU_FORMATS = ("fp32", "bf16")
CUDA_FORMATS = ("bf16", "fp8")

TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def torch_dtype(fmt: str) -> Any:
    import torch

    if fmt not in TORCH_DTYPES:
        raise InputError(f"dtype '{fmt}' cannot run the reference transformer; choose one of "
                         f"{', '.join(TORCH_DTYPES)}.")
    return getattr(torch, TORCH_DTYPES[fmt])


def resolve_device(device: str = "auto") -> str:
    """'auto' is the first CUDA device when there is one, else the CPU."""
    import torch

    if device == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"--device {device}: no CUDA device is visible to torch; use "
                         "--device cpu.")
    if device != "cpu" and not device.startswith("cuda"):
        raise InputError(f"--device {device}: choose cpu, cuda, cuda:N or auto.")
    return "cuda:0" if device == "cuda" else device


def measure_ceilings(device: str = "cpu", *, formats: tuple[str, ...] | None = None,
                     gemm_size: int | None = None, buffer_bytes: int | None = None,
                     warmup: int = 1, repeats: int = 5) -> Ceilings:
    """Median GEMM FLOP/s per format, copy and read bandwidth, and what ran them."""
    cuda = device.startswith("cuda")
    formats = formats or (CUDA_FORMATS if cuda else CPU_FORMATS)
    size = gemm_size or (CUDA_GEMM_SIZE if cuda else CPU_GEMM_SIZE)
    buffer = buffer_bytes or (CUDA_BUFFER_BYTES if cuda else CPU_BUFFER_BYTES)
    timing = {"device": device, "warmup": warmup, "repeats": repeats}
    gemm, notes = {}, []
    for fmt in formats:
        try:
            gemm[fmt] = gemm_flops_per_s(fmt, size, **timing)
        except (RuntimeError, TypeError, AttributeError) as err:  # e.g. fp8 before Hopper/Ada
            notes.append(f"{fmt} GEMM not measured: {str(err).splitlines()[0]}")
    if not gemm:
        raise InputError(f"no GEMM format ran on {device} ({'; '.join(notes)}).")
    if not cuda:
        gemm, slow = ceiling_formats(gemm)
        notes += [f"{fmt} GEMM left out: {rate / 1e9:.3g} GFLOP/s, slower than fp32's, is "
                  "torch's fallback path (no 16-bit matrix instructions), no ceiling; 16-bit "
                  "matmuls are priced at the fp32 rate" for fmt, rate in slow.items()]
    copy_bps, read_bps = bandwidth_bytes_per_s(buffer, **timing)
    name, device_class, memory = describe_device(device)
    return Ceilings(device=device, device_name=name, device_class=device_class,
                    threads=_threads(), clock=clock_for(device), versions=library_versions(device),
                    memory_bytes=memory, gemm_flops_per_s=gemm, gemm_size=size,
                    copy_bytes_per_s=copy_bps, read_bytes_per_s=read_bps, buffer_bytes=buffer,
                    warmup=warmup, repeats=repeats, notes=notes,
                    vector_bits=0 if cuda else cpu_vector_bits())


def ceiling_formats(gemm: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """(kept, left out) of a CPU's measured GEMM rates: a 16-bit format slower than fp32 ran
    torch's fallback (the CPU has no 16-bit matrix or dot-product instructions and torch
    converts element by element); any engine would widen to fp32 instead, so it is no
    ceiling."""
    fp32 = gemm.get("fp32")
    slow = {f: r for f, r in gemm.items() if fp32 is not None and f != "fp32" and r < fp32}
    return {f: r for f, r in gemm.items() if f not in slow}, slow


# torch's CPU kernel capability (ATen's runtime dispatch) and the SIMD width it runs.
CAPABILITY_BITS = {"AVX512": 512, "AVX512_BF16": 512, "AMX": 512, "AVX2": 256, "SVE256": 256,
                   "SVE128": 128, "DEFAULT": 128}


def cpu_vector_bits() -> int:
    """The SIMD width torch's CPU kernels ran with here (0 where torch does not say)."""
    import torch

    try:
        capability = str(torch.backends.cpu.get_cpu_capability()).upper()
    except (AttributeError, RuntimeError):
        return 0
    return CAPABILITY_BITS.get(capability, 0)


def gemm_flops_per_s(fmt: str, size: int, *, device: str, warmup: int, repeats: int) -> float:
    """2·n³ FLOPs of an (n×n)·(n×n) matmul over its median time."""
    import torch

    if fmt == "fp8":
        matmul = _fp8_matmul(size, device)
    else:
        a = torch.randn(size, size, device=device, dtype=torch_dtype(fmt))
        b = torch.randn(size, size, device=device, dtype=torch_dtype(fmt))
        matmul = lambda: torch.mm(a, b)  # noqa: E731
    sample = time_call(matmul, device=device, warmup=warmup, repeats=repeats)
    return 2.0 * size**3 / sample.median_s


def _fp8_matmul(size: int, device: str) -> Any:
    """e4m3 × e4m3 with bf16 output through ``torch._scaled_mm`` (sm_89+ GPUs); the second
    operand must be column-major."""
    import torch

    if not device.startswith("cuda"):
        raise RuntimeError("fp8 matmul needs a CUDA device")
    a = torch.randn(size, size, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(size, size, device=device).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=device)
    torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def bandwidth_bytes_per_s(buffer_bytes: int, *, device: str, warmup: int,
                          repeats: int) -> tuple[float, float]:
    """(copy, read) bytes/s over a ``buffer_bytes`` fp32 buffer. Copy counts the bytes read
    and written (2 × buffer); read sums the buffer (1 × buffer). The buffers are filled first:
    untouched pages of a fresh CPU allocation all map to one zero page, which reads at cache
    speed."""
    import torch

    elements = buffer_bytes // 4
    src = torch.ones(elements, device=device)
    dst = torch.ones(elements, device=device)
    copy = time_call(lambda: dst.copy_(src), device=device, warmup=warmup, repeats=repeats)
    read = time_call(lambda: src.sum(), device=device, warmup=warmup, repeats=repeats)
    return 2.0 * elements * 4 / copy.median_s, elements * 4 / read.median_s


def describe_device(device: str) -> tuple[str, str, float]:
    """(name, device class, memory bytes) of ``device``."""
    import torch

    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        return props.name, gpu_class(props.name), float(props.total_memory)
    return _cpu_name(), "cpu", float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def gpu_class(name: str) -> str:
    """NVIDIA's naming: GeForce cards are consumer GPUs, other RTX cards (RTX A6000, RTX 6000
    Ada) workstation GPUs, the rest (A100, H100, L4…) datacenter GPUs."""
    if "GeForce" in name:
        return "consumer_gpu"
    return "workstation_gpu" if "RTX" in name else "datacenter_gpu"


def available_memory_bytes(device: str) -> float:
    """Memory free for a new allocation now: CUDA's free figure, or MemAvailable on Linux."""
    import torch

    if device.startswith("cuda"):
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return float(free)
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024  # the figure is in KiB
    except OSError:
        pass
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def library_versions(device: str) -> dict[str, str]:
    import numpy
    import torch

    from phasewise.version import __version__

    versions = {"phasewise": __version__, "python": sys.version.split()[0],
                "torch": torch.__version__, "numpy": numpy.__version__,
                "blas": "mkl" if torch.backends.mkl.is_available() else "other"}
    if device.startswith("cuda"):
        versions["cuda"] = str(torch.version.cuda)
        versions["cudnn"] = str(torch.backends.cudnn.version())
    return versions


def threads_label(ceilings: Ceilings) -> str:
    """"N threads, " for a CPU run; nothing for a GPU's (the host threads torch keeps do not
    run its kernels)."""
    if ceilings.device.startswith("cuda"):
        return ""
    return f"{ceilings.threads} thread{'' if ceilings.threads == 1 else 's'}, "


def measured_name(ceilings: Ceilings) -> str:
    """The device as measured: a CPU's name with the threads that ran, a GPU's alone."""
    return f"{ceilings.device_name} ({threads_label(ceilings)}measured)"


def hardware_from_ceilings(ceilings: Ceilings, *, name: str = "local") -> HardwareSpec:
    """The local device as the cost model sees it: measured GEMM ceilings as peaks, measured
    copy bandwidth as the memory bandwidth."""
    return HardwareSpec(
        name=name, display_name=measured_name(ceilings),
        device_class=ceilings.device_class, peak_flops_per_s=dict(ceilings.gemm_flops_per_s),
        memory_bytes=ceilings.memory_bytes,
        memory_bandwidth_bytes_per_s=ceilings.copy_bytes_per_s,
        vector_bits=ceilings.vector_bits,
        sources={"compute": f"measured: median of {ceilings.repeats} square GEMMs of side "
                            f"{ceilings.gemm_size}",
                 "memory": f"measured: median copy of {ceilings.buffer_bytes / 2**20:,.0f} MiB, "
                           "bytes read + written"},
        notes="Ceilings measured by phasewise profile --micro.")
