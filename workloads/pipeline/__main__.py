import sys

from workloads.pipeline.cli import main

sys.exit(main())
