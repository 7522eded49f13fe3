"""Published peak figures of GPUs one rents, and the throughput `plan --gpu` predicts from them before any
measurement (no TensorFlow).

Rule: positions/s of one GPU = MFU x peak FLOP/s / (memory.training_flops of the model), the model FLOP
utilisation MFU taken as the interval MFU_LOW-MFU_HIGH (0.2-0.4: what small convolutional networks of a
few hundred thousand to a few million weights typically reach with cuDNN; a stated guess, not measured
here). The peak is the dense (no sparsity) FP16/BF16 tensor-core rate with FP32 accumulation under
model.mixed_precision = "mixed_float16"/"mixed_bfloat16", else the TF32 tensor rate (FP32 on a T4, which has
no TF32). N GPUs: N x that interval, the low end x MULTI_GPU_LOW (0.85: the all-reduce) when N > 1. The
input pipeline is the other ceiling: PIPELINE_PER_CORE positions/s per CPU core (`bench train`'s pipeline
figure on the development machine, docs/benchmarks.md: 314,669 positions/s on 2 cores). A measured fit
(`bench scaling`) replaces all of this.
"""

from __future__ import annotations

import dataclasses

from shogi_dnn.errors import ConfigError

MFU_LOW, MFU_HIGH = 0.2, 0.4
MULTI_GPU_LOW = 0.85
PIPELINE_PER_CORE = 150_000


@dataclasses.dataclass(frozen=True)
class Gpu:
    """One GPU's published peaks: TFLOP/s dense (mixed precision, float32) and memory bandwidth."""

    name: str
    mixed_tflops: float        # FP16/BF16 tensor cores, FP32 accumulate, dense
    float32_tflops: float      # TF32 tensor cores dense (FP32 where there is no TF32)
    bandwidth_gbs: float
    memory_gib: int
    source: str

    def peak_flops(self, mixed_precision: str) -> float:
        """FLOP/s the model's precision can reach at best (model.mixed_precision)."""
        return 1e12 * (self.float32_tflops if mixed_precision == "none" else self.mixed_tflops)


GPUS: dict[str, Gpu] = {g.name.lower(): g for g in (
    # NVIDIA T4 datasheet: "Mixed Precision (FP16/FP32) 65 TFLOPS", FP32 8.1 TFLOPS, GDDR6 320 GB/s
    Gpu("T4", 65.0, 8.1, 320.0, 16, "https://www.nvidia.com/en-us/data-center/tesla-t4/ (datasheet)"),
    # AWS G5's A10G: NVIDIA publishes no datasheet; 70 TFLOPS BF16/FP16 tensor and 35 TF32 dense as listed
    # by baseten (the A10's datasheet says 125 / 62.5); 600 GB/s GDDR6 as the A10. The least certain row.
    Gpu("A10G", 70.0, 35.0, 600.0, 24,
        "https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/ (no NVIDIA datasheet)"),
    # NVIDIA L4 datasheet: FP16/BF16 tensor 242 TFLOPS and TF32 120 with sparsity (half dense), 300 GB/s
    Gpu("L4", 121.0, 60.0, 300.0, 24, "https://www.nvidia.com/en-us/data-center/l4/ (datasheet)"),
    # NVIDIA A100 datasheet (SXM 80GB): BF16/FP16 tensor 312 TFLOPS, TF32 156 (dense), HBM2e 2,039 GB/s
    Gpu("A100", 312.0, 156.0, 2039.0, 80, "https://www.nvidia.com/en-us/data-center/a100/ (datasheet)"),
    # NVIDIA H100 datasheet (SXM): BF16/FP16 tensor 1,979 and TF32 989 TFLOPS with sparsity (half dense),
    # HBM3 3.35 TB/s
    Gpu("H100", 989.0, 494.0, 3350.0, 80, "https://www.nvidia.com/en-us/data-center/h100/ (datasheet)"),
    # NVIDIA Ada (AD102) whitepaper, GeForce RTX 4090: FP16 tensor FP32-accumulate 165.2 TFLOPS dense,
    # TF32 82.6 dense, GDDR6X 1,008 GB/s
    Gpu("RTX4090", 165.2, 82.6, 1008.0, 24,
        "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"),
)}


def find_gpu(name: str) -> Gpu:
    """The GPU named `name` (case and spaces, dashes ignored: "rtx 4090", "h100").

    Raises:
        ConfigError: an unknown name, in one line listing the known ones.
    """
    key = name.lower().replace(" ", "").replace("-", "").replace("geforce", "")
    if key not in GPUS:
        raise ConfigError(f"--gpu {name!r}: no published figures for it; known: "
                          f"{', '.join(g.name for g in GPUS.values())} (or measure it: `shogi-dnn bench "
                          "scaling`, then --scaling-fit)")
    return GPUS[key]


def gpu_rate(gpu: Gpu, flops_per_position: float, mixed_precision: str,
             devices: int = 1) -> tuple[float, float]:
    """(low, high) positions/s of `devices` such GPUs training a model of `flops_per_position`."""
    peak = gpu.peak_flops(mixed_precision) / flops_per_position
    low, high = MFU_LOW * peak * devices, MFU_HIGH * peak * devices
    return (low * MULTI_GPU_LOW if devices > 1 else low), high
