import sys

from workloads.serve.cli import main

sys.exit(main())
