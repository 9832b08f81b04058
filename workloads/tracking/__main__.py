import sys

from workloads.tracking.cli import main

sys.exit(main())
