"""The machine a suite ran on (GPU, clocks, power limit, driver, CUDA, torch) and flashbox's commit."""
import datetime
import os
import subprocess

HBM_PEAK = {"H200": 4.8e12, "H100 SXM": 3.35e12, "H100 PCIe": 2.0e12, "H100 NVL": 3.9e12, "H100": 3.35e12,
            "A100-SXM4-80GB": 2.039e12, "A100-SXM4-40GB": 1.555e12, "A100": 1.555e12, "L40S": 0.864e12}


def hbm_peak(gpu_name):
    """Datasheet memory bandwidth in bytes/s of a GPU named like torch names it, or None."""
    for key, value in HBM_PEAK.items():
        if key in gpu_name:
            return value
    return None


def _nvml():
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or 0))
        c = pynvml
        return {"sm_clock_mhz": c.nvmlDeviceGetClockInfo(h, c.NVML_CLOCK_SM),
                "sm_clock_max_mhz": c.nvmlDeviceGetMaxClockInfo(h, c.NVML_CLOCK_SM),
                "mem_clock_mhz": c.nvmlDeviceGetClockInfo(h, c.NVML_CLOCK_MEM),
                "mem_clock_max_mhz": c.nvmlDeviceGetMaxClockInfo(h, c.NVML_CLOCK_MEM),
                "power_limit_w": c.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
                "driver": c.nvmlSystemGetDriverVersion()}
    except Exception:  # no pynvml, or no NVML: nvidia-smi below
        return None


def _smi():
    q = "clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit,driver_version"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=20).stdout.strip().split(", ")
        num = lambda s: float(s) if s.replace(".", "", 1).isdigit() else None  # noqa: E731
        return {"sm_clock_mhz": num(out[0]), "sm_clock_max_mhz": num(out[1]), "mem_clock_mhz": num(out[2]),
                "mem_clock_max_mhz": num(out[3]), "power_limit_w": num(out[4]), "driver": out[5]}
    except Exception:
        return {}


def machine():
    import torch
    p = torch.cuda.get_device_properties(0)
    m = {"gpu": p.name, "sm_count": p.multi_processor_count, "memory_gb": round(p.total_memory / 2**30, 1),
         "compute_capability": f"{p.major}.{p.minor}", "cuda_runtime": torch.version.cuda, "torch": torch.__version__}
    m.update(_nvml() or _smi())
    m["hbm_peak_bytes_per_s"] = hbm_peak(p.name)
    return m


def commit(lib_path):
    """The commit of the checkout the library was built from (its folder's git), or None."""
    try:
        folder = os.path.dirname(os.path.abspath(lib_path))
        out = subprocess.run(["git", "-C", folder, "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip() or None
    except Exception:
        return None


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
