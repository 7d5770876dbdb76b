"""CWRPO training and evaluation support: benchmark datasets, the one scorer shared by evaluation and
training rewards, and (later) the rollout and optimisation loop.

`training` may import `operators`; `operators` never imports `training`.
"""
