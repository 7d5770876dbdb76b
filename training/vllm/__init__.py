"""The vLLM side of CWRPO training: a server process to generate rollouts, and LoRA hand-over after each step.

with VLLMServer.start(model_dir, served_name="base", max_lora_rank=64, max_loras=2, python=vllm_python()) as server:
    sync = LoraSync(server.base_url, "run", max_loaded=1)
    name = await sync.publish(run_dir / "adapters" / "step-1", step=1)  # rollouts now use model=name

Nothing here imports vLLM: it runs as its own process, possibly from another virtualenv.
"""

from training.vllm.lora_sync import LoraSync, LoraSyncError, ProbeDelta, adapter_name
from training.vllm.replicas import NoReplicaLeftError, ReplicaPool, ReplicaSync
from training.vllm.server import VLLM_PYTHON_ENV, VLLMServer, VLLMServerError, free_port, vllm_python

__all__ = [
    "VLLM_PYTHON_ENV",
    "LoraSync",
    "LoraSyncError",
    "NoReplicaLeftError",
    "ProbeDelta",
    "ReplicaPool",
    "ReplicaSync",
    "VLLMServer",
    "VLLMServerError",
    "adapter_name",
    "free_port",
    "vllm_python",
]
