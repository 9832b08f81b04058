from workloads.monitor.cli import main

raise SystemExit(main())
