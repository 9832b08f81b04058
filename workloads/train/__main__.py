import sys

from workloads.train.train import main

sys.exit(main())
