import sys

from workloads.gpucheck.cli import main

sys.exit(main())
