#!/usr/bin/env python3
"""
Cross-check of test/golden/schedulers-numpy.json against diffusers itself.

The golden tables are written by scripts/golden/schedulers.py, a NumPy
re-implementation of diffusers' formulas (diffusers is not on the package
index here). This script runs diffusers' own EulerDiscreteScheduler,
EulerAncestralDiscreteScheduler and StableDiffusionImg2ImgPipeline.get_timesteps
from a source checkout over every table of the golden file, prints the
largest relative difference of timesteps, σ and init_noise_sigma, and fails
above MAX_RELATIVE (the unit test allows 1e-4).

Usage: python scripts/golden/check_schedulers_diffusers.py DIFFUSERS_SRC [GOLDEN.json]
(DIFFUSERS_SRC: the src/ folder of a diffusers checkout; needs torch and
transformers, which diffusers' img2img pipeline imports.)
"""

import json
import sys

sys.path.insert(0, sys.argv[1])

import diffusers  # noqa: E402
from diffusers import EulerAncestralDiscreteScheduler, EulerDiscreteScheduler  # noqa: E402
from diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion_img2img import StableDiffusionImg2ImgPipeline  # noqa: E402

MAX_RELATIVE = 1e-5

CLASSES = {"EulerDiscreteScheduler": EulerDiscreteScheduler, "EulerAncestralDiscreteScheduler": EulerAncestralDiscreteScheduler}


class Img2Img:
    """What get_timesteps reads of its pipeline: the scheduler."""

    def __init__(self, scheduler):
        self.scheduler = scheduler


def reference(case):
    config = case["config"]
    # A config without _class_name is EulerDiscreteScheduler's (scheduler.ts's default sampler).
    scheduler = CLASSES[config.get("_class_name", "EulerDiscreteScheduler")].from_config(config)
    scheduler.set_timesteps(case["steps"])
    if "strength" not in case:
        return scheduler.timesteps.tolist(), scheduler.sigmas.tolist(), float(scheduler.init_noise_sigma)
    timesteps, _ = StableDiffusionImg2ImgPipeline.get_timesteps(Img2Img(scheduler), case["steps"], case["strength"], "cpu")
    return timesteps.tolist(), scheduler.sigmas[scheduler.begin_index :].tolist(), None


def relative(a, b):
    return abs(a - b) / abs(b) if b != 0 else abs(a)


def main():
    path = sys.argv[2] if len(sys.argv) > 2 else "test/golden/schedulers-numpy.json"
    cases = json.load(open(path))["cases"]
    worst = {"timesteps": 0.0, "sigmas": 0.0, "init_noise_sigma": 0.0}
    for case in cases:
        timesteps, sigmas, init = reference(case)
        for what, ours, theirs in [("timesteps", case["timesteps"], timesteps), ("sigmas", case["sigmas"], sigmas)]:
            if len(ours) != len(theirs):
                sys.exit(f"{case['name']}: {len(ours)} {what} in the golden, {len(theirs)} from diffusers")
            worst[what] = max([worst[what]] + [relative(o, t) for o, t in zip(ours, theirs)])
        if init is not None and "init_noise_sigma" in case:
            worst["init_noise_sigma"] = max(worst["init_noise_sigma"], relative(case["init_noise_sigma"], init))
    print(f"diffusers {diffusers.__version__}: {len(cases)} cases; largest relative difference: " + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))
    if max(worst.values()) > MAX_RELATIVE:
        sys.exit(f"differs from diffusers by more than {MAX_RELATIVE}")


if __name__ == "__main__":
    main()
