"""The supervised warm start of the Flow-Director policy (`flowsteer train sft`, docs/design/training.md).

`dataset` turns transcripts into action-masked examples and mixes workflow families; `trainer` runs the LoRA
fine-tuning on the CWRPO learner's code; `valid_share` measures how often the policy's turns parse.
"""
