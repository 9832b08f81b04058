import sys

from workloads.collectives.allreduce import main

sys.exit(main())
