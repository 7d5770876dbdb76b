"""`python -m training ...` is the `flowsteer` command; what `torchrun --nproc-per-node N -m training train --config
...` runs on each rank (docs/design/training.md, "Data-parallel learner")."""

from training.cli import main

raise SystemExit(main())
