"""Fuses Stable Diffusion graphs as ONNX Runtime's transformer optimiser does
for GPU runtimes (the tool GPU / web exports such as schmuell/sd-turbo-ort-web
are made with): GroupNorm, SkipGroupNorm, NhwcConv, BiasSplitGelu, BiasAdd,
MultiHeadAttention, SkipLayerNormalization, ... in the com.microsoft domain.

    python scripts/golden/ort_fused_sd.py SOURCE_DIR TARGET_DIR

SOURCE_DIR holds fp32 <role>/model.onnx graphs (the synthetic SD-Turbo;
scripts/golden/compare-ort-fused.ts writes it and runs this); each fused
graph is written to TARGET_DIR/<role>.onnx and its operator counts printed.
Only a check of lserve's rewrite (src/runtimes/onnx/cpu-rewrite.ts) against
the optimiser's own output; the test suite does not need Python.
"""

import collections
import sys

from onnxruntime.transformers.fusion_options import FusionOptions
from onnxruntime.transformers.optimizer import optimize_model

MODEL_TYPES = {"unet": "unet", "vae_decoder": "vae", "vae_encoder": "vae", "text_encoder": "clip"}


def main(source: str, target: str) -> None:
    for role, model_type in MODEL_TYPES.items():
        options = FusionOptions(model_type)
        # use_gpu: the fusions a GPU (or WebGPU) export gets; opt_level 0: the optimiser's fusions only.
        model = optimize_model(f"{source}/{role}/model.onnx", model_type=model_type, opt_level=0, optimization_options=options, use_gpu=True)
        counts = collections.Counter(f"{n.domain or 'ai.onnx'}.{n.op_type}" for n in model.model.graph.node if n.domain == "com.microsoft")
        print(role, dict(sorted(counts.items())), flush=True)
        model.save_model_to_file(f"{target}/{role}.onnx")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
