#!/usr/bin/env python3
"""
Golden σ and timestep tables for lserve's Euler samplers
(src/families/stable-diffusion/scheduler.ts), written to
test/golden/schedulers-numpy.json and compared by
test/unit/image-scheduler.test.ts.

diffusers is not on the package index here, so the tables do not come from
diffusers: this script is an independent re-implementation, with NumPy only,
of the formulas of two diffusers scheduler classes, EulerDiscreteScheduler
and EulerAncestralDiscreteScheduler, for the configs in CASES below
(SD-Turbo's scheduler_config.json, SD 1.5 / 2.1-style configs, and each
class's __init__ defaults), plus the img2img pipeline's get_timesteps. Each
formula as read from diffusers' source (0.40.0.dev0, commit 58eb52c0; line
numbers are that commit's), under src/diffusers/:

- schedulers/scheduling_euler_discrete.py, EulerDiscreteScheduler:
  __init__ (L203-275): betas from torch.linspace in float32, linear or
  scaled_linear (L232-235) -> torch_linspace_f32, alphas_cumprod
  (torch.cumprod, L246) -> alphas_cumprod; set_timesteps (L350-481): the
  linspace / leading / trailing spacings (L411-430) -> spaced_timesteps, σ
  = ((1 - ᾱ) / ᾱ) ** 0.5 and np.interp over the timesteps (L436-439) ->
  training_sigmas and set_timesteps, Karras sigmas (L449) ->
  convert_to_karras (from _convert_to_karras, L520-557) with the timesteps
  mapped back by sigma_to_t (from _sigma_to_t, L483-518), the last σ by
  final_sigmas_type (L460-466); init_noise_sigma (L278-292) ->
  init_noise_sigma.
- schedulers/scheduling_euler_ancestral_discrete.py,
  EulerAncestralDiscreteScheduler: the same __init__ (L178-227) and
  set_timesteps (L285-328): the same spacings and interpolated σ, no Karras
  sigmas and a final σ of 0 (the class has neither use_karras_sigmas nor
  final_sigmas_type: it ignores those keys) -> the `ancestral` branches.
- pipelines/stable_diffusion/pipeline_stable_diffusion_img2img.py:
  StableDiffusionImg2ImgPipeline.get_timesteps (L724-733): the last
  int(N·strength) timesteps, σ from the begin index -> img2img.

torch's float32 arithmetic is mirrored where diffusers uses it: the betas
come from torch.linspace(..., dtype=float32), alphas_cumprod from
torch.cumprod (products accumulated in double, stored as float32), σ from
float32 tensor arithmetic; set_timesteps' numpy steps then run in float64
over those float32 values, and the results are cast to float32.

scripts/golden/check_schedulers_diffusers.py runs diffusers' own classes
from a source checkout over every table of the golden file: against
diffusers 0.40.0.dev0 (commit 58eb52c0, with torch 2.13 on CPU) all 38
tables agree within 4e-7 relative (timesteps 3.7e-7, σ 2.2e-7,
init_noise_sigma 9.7e-8), well inside the test's 1e-4.

Usage: python3 scripts/golden/schedulers.py [OUT.json]
"""

import json
import math
import sys

import numpy as np

F32 = np.float32

# Configs as scheduler_config.json files ship them; keys left out take
# diffusers' __init__ defaults.
SD_TURBO = {
    "_class_name": "EulerDiscreteScheduler",
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "beta_start": 0.00085,
    "clip_sample": False,
    "interpolation_type": "linear",
    "num_train_timesteps": 1000,
    "prediction_type": "epsilon",
    "sample_max_value": 1.0,
    "set_alpha_to_one": False,
    "skip_prk_steps": True,
    "steps_offset": 1,
    "timestep_spacing": "trailing",
    "timestep_type": "discrete",
    "trained_betas": None,
    "use_karras_sigmas": False,
}

SD15 = {
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "beta_start": 0.00085,
    "num_train_timesteps": 1000,
    "steps_offset": 1,
}

CASES = [
    ("sd-turbo: Euler, scaled_linear, trailing, epsilon", SD_TURBO, [1, 2, 4, 16], [(4, 0.5), (4, 0.75), (16, 0.5)]),
    (
        "SD 1.5 style: Euler, scaled_linear, leading, steps_offset 1",
        {"_class_name": "EulerDiscreteScheduler", **SD15, "timestep_spacing": "leading", "prediction_type": "epsilon"},
        [1, 4, 20, 50],
        [(4, 0.5), (20, 0.3), (50, 0.8)],
    ),
    (
        "SD 2.1-v style: Euler, v_prediction, trailing, Karras sigmas",
        {"_class_name": "EulerDiscreteScheduler", **SD15, "timestep_spacing": "trailing", "prediction_type": "v_prediction", "use_karras_sigmas": True},
        [1, 4, 25],
        [],
    ),
    (
        "Euler, leading, Karras sigmas",
        {"_class_name": "EulerDiscreteScheduler", **SD15, "timestep_spacing": "leading", "use_karras_sigmas": True},
        [4, 30],
        [],
    ),
    (
        "Euler, Karras sigmas between sigma_min and sigma_max from the config",
        {"_class_name": "EulerDiscreteScheduler", **SD15, "timestep_spacing": "leading", "use_karras_sigmas": True, "sigma_min": 0.0292, "sigma_max": 14.6146},
        [10],
        [],
    ),
    (
        "Euler with diffusers' defaults: linear betas 0.0001-0.02, linspace, steps_offset 0",
        {"_class_name": "EulerDiscreteScheduler"},
        [1, 3, 6, 10],
        [],
    ),
    (
        "Euler, trailing, final_sigmas_type sigma_min",
        {**SD_TURBO, "final_sigmas_type": "sigma_min"},
        [4],
        [],
    ),
    (
        "Euler, 500 training timesteps, linear betas, trailing",
        {"_class_name": "EulerDiscreteScheduler", "num_train_timesteps": 500, "beta_schedule": "linear", "beta_start": 0.0001, "beta_end": 0.02, "timestep_spacing": "trailing"},
        [4, 7],
        [(4, 0.5)],
    ),
    (
        "Euler ancestral, scaled_linear, leading, steps_offset 1",
        {"_class_name": "EulerAncestralDiscreteScheduler", **SD15, "timestep_spacing": "leading"},
        [1, 4, 20],
        [(4, 0.5), (20, 0.6)],
    ),
    (
        "Euler ancestral, v_prediction, trailing",
        {"_class_name": "EulerAncestralDiscreteScheduler", **SD15, "timestep_spacing": "trailing", "prediction_type": "v_prediction"},
        [4, 8],
        [(8, 0.25)],
    ),
    (
        "Euler ancestral with diffusers' defaults (linear, linspace)",
        {"_class_name": "EulerAncestralDiscreteScheduler"},
        [5],
        [],
    ),
    (
        "Euler ancestral ignores use_karras_sigmas and final_sigmas_type (it has neither)",
        {"_class_name": "EulerAncestralDiscreteScheduler", **SD15, "timestep_spacing": "trailing", "use_karras_sigmas": True, "final_sigmas_type": "sigma_min"},
        [4],
        [],
    ),
]

EULER_DEFAULTS = {
    "num_train_timesteps": 1000,
    "beta_start": 0.0001,
    "beta_end": 0.02,
    "beta_schedule": "linear",
    "prediction_type": "epsilon",
    "interpolation_type": "linear",
    "use_karras_sigmas": False,
    "sigma_min": None,
    "sigma_max": None,
    "timestep_spacing": "linspace",
    "steps_offset": 0,
    "final_sigmas_type": "zero",
}

ANCESTRAL_KEYS = ["num_train_timesteps", "beta_start", "beta_end", "beta_schedule", "prediction_type", "timestep_spacing", "steps_offset"]


def resolved(config):
    """The config as the scheduler class sees it: its own keys, defaults for the missing ones, others ignored."""
    ancestral = config.get("_class_name") == "EulerAncestralDiscreteScheduler"
    keys = ANCESTRAL_KEYS if ancestral else list(EULER_DEFAULTS)
    out = {k: (config[k] if config.get(k) is not None else EULER_DEFAULTS[k]) for k in keys}
    out["ancestral"] = ancestral
    return out


def torch_linspace_f32(start, end, steps):
    """torch.linspace(start, end, steps, dtype=torch.float32) on CPU: float32 step, the first half counted from start, the second from end."""
    start = F32(start)
    end = F32(end)
    step = F32((end - start) / F32(steps - 1))
    out = np.empty(steps, dtype=F32)
    halfway = steps // 2
    for i in range(steps):
        out[i] = start + step * F32(i) if i < halfway else end - step * F32(steps - i - 1)
    return out


def alphas_cumprod(c):
    n = c["num_train_timesteps"]
    if c["beta_schedule"] == "linear":
        betas = torch_linspace_f32(c["beta_start"], c["beta_end"], n)
    elif c["beta_schedule"] == "scaled_linear":
        root = torch_linspace_f32(c["beta_start"] ** 0.5, c["beta_end"] ** 0.5, n)
        betas = (root * root).astype(F32)
    else:
        raise ValueError(c["beta_schedule"])
    alphas = (F32(1.0) - betas).astype(F32)
    # torch.cumprod on CPU accumulates float32 products in double.
    out = np.empty(n, dtype=F32)
    acc = 1.0
    for i in range(n):
        acc *= float(alphas[i])
        out[i] = F32(acc)
    return out


def training_sigmas(ac):
    """np.array(((1 - self.alphas_cumprod) / self.alphas_cumprod) ** 0.5): float32, timestep 0 first."""
    return np.sqrt(((F32(1.0) - ac) / ac).astype(F32)).astype(F32)


def spaced_timesteps(c, n_steps):
    n = c["num_train_timesteps"]
    spacing = c["timestep_spacing"]
    if spacing == "linspace":
        return np.linspace(0, n - 1, n_steps, dtype=np.float32)[::-1].copy()
    if spacing == "leading":
        step_ratio = n // n_steps
        t = (np.arange(0, n_steps) * step_ratio).round()[::-1].copy().astype(np.float32)
        t += c["steps_offset"]
        return t
    if spacing == "trailing":
        step_ratio = n / n_steps
        t = np.arange(n, 0, -step_ratio).round().copy().astype(np.float32)
        t -= 1
        return t
    raise ValueError(spacing)


def sigma_to_t(sigma, log_sigmas):
    """EulerDiscreteScheduler._sigma_to_t."""
    log_sigma = np.log(np.maximum(sigma, 1e-10))
    dists = log_sigma - log_sigmas[:, np.newaxis]
    low_idx = np.cumsum((dists >= 0), axis=0).argmax(axis=0).clip(max=log_sigmas.shape[0] - 2)
    high_idx = low_idx + 1
    low = log_sigmas[low_idx]
    high = log_sigmas[high_idx]
    w = (low - log_sigma) / (low - high)
    w = np.clip(w, 0, 1)
    t = (1 - w) * low_idx + w * high_idx
    return t.reshape(sigma.shape)


def convert_to_karras(c, in_sigmas, n_steps):
    """EulerDiscreteScheduler._convert_to_karras (ρ = 7)."""
    sigma_min = c["sigma_min"] if c["sigma_min"] is not None else in_sigmas[-1].item()
    sigma_max = c["sigma_max"] if c["sigma_max"] is not None else in_sigmas[0].item()
    rho = 7.0
    ramp = np.linspace(0, 1, n_steps)
    min_inv_rho = sigma_min ** (1 / rho)
    max_inv_rho = sigma_max ** (1 / rho)
    return (max_inv_rho + ramp * (min_inv_rho - max_inv_rho)) ** rho


def set_timesteps(c, n_steps):
    ac = alphas_cumprod(c)
    timesteps = spaced_timesteps(c, n_steps)
    sigmas = training_sigmas(ac)
    log_sigmas = np.log(sigmas)
    sigmas = np.interp(timesteps, np.arange(0, len(sigmas)), sigmas)
    if not c["ancestral"]:
        if c["interpolation_type"] != "linear":
            raise ValueError(c["interpolation_type"])
        if c["use_karras_sigmas"]:
            sigmas = convert_to_karras(c, sigmas, n_steps)
            timesteps = np.array([sigma_to_t(sigma, log_sigmas) for sigma in sigmas])
        if c["final_sigmas_type"] == "sigma_min":
            sigma_last = math.sqrt(float(F32((F32(1.0) - ac[0]) / ac[0])))
        else:
            sigma_last = 0
    else:
        sigma_last = 0.0
    sigmas = np.concatenate([sigmas, [sigma_last]]).astype(np.float32)
    timesteps = timesteps.astype(np.float32)
    return timesteps, sigmas


def init_noise_sigma(c, sigmas):
    max_sigma = float(sigmas.max())
    if c["timestep_spacing"] in ["linspace", "trailing"]:
        return max_sigma
    return float(F32((F32(max_sigma) ** 2 + 1) ** 0.5))


def img2img(c, n_steps, strength):
    timesteps, sigmas = set_timesteps(c, n_steps)
    init_timestep = min(int(n_steps * strength), n_steps)
    t_start = max(n_steps - init_timestep, 0)
    return timesteps[t_start:], sigmas[t_start:]


def floats(values):
    return [float(v) for v in values]


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else "test/golden/schedulers-numpy.json"
    cases = []
    for name, config, steps_list, partials in CASES:
        c = resolved(config)
        for steps in steps_list:
            timesteps, sigmas = set_timesteps(c, steps)
            assert len(timesteps) == steps, (name, steps, len(timesteps))
            cases.append(
                {
                    "name": f"{name}, {steps} steps",
                    "config": config,
                    "steps": steps,
                    "timesteps": floats(timesteps),
                    "sigmas": floats(sigmas),
                    "init_noise_sigma": init_noise_sigma(c, sigmas),
                }
            )
        for steps, strength in partials:
            assert float(steps * strength).is_integer(), "img2img tables only where steps·strength is whole"
            timesteps, sigmas = img2img(c, steps, strength)
            cases.append(
                {
                    "name": f"{name}, img2img {steps} steps at strength {strength}",
                    "config": config,
                    "steps": steps,
                    "strength": strength,
                    "timesteps": floats(timesteps),
                    "sigmas": floats(sigmas),
                }
            )
    doc = {
        "about": "σ and timestep tables computed by scripts/golden/schedulers.py, an independent NumPy re-implementation of the formulas of diffusers' EulerDiscreteScheduler / EulerAncestralDiscreteScheduler set_timesteps (and the img2img pipeline's get_timesteps); not generated by diffusers",
        "cases": cases,
    }
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"{len(cases)} tables → {out_path}")


if __name__ == "__main__":
    main()
